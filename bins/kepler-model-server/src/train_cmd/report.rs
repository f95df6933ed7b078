//! The training report: one self-contained HTML page (inline SVG, no scripts, no external
//! files) with every model's accuracy and, for the best model of each output type and
//! feature group, predicted-vs-measured and residual plots per component.
//!
//! The plots are drawn by plotters' SVG backend into strings embedded in the page; their
//! text is SVG `<text>`, rendered by the browser with its own fonts.

use std::fmt::Write;

use plotters::prelude::*;

use kepler_models::train::{TrainReport, TrainedModel};

/// Plot size in pixels.
const W: u32 = 380;
const H: u32 = 280;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn pct(p: Option<f64>) -> String {
    p.map_or("n/a".into(), |p| format!("{p:.2}"))
}

pub fn html(pipeline: &str, source: &str, r: &TrainReport) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>kepler-model-server train: \
         {p}</title><style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:\
         collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}.no{{color:#a00}}.yes{{color:#070}}\
         svg{{margin:4px;border:1px solid #eee}}</style></head><body>\
         <h1>Training report: pipeline {p}, source {src}</h1>\
         <p>{rows} usable rows ({skipped} skipped), seed {seed}: {train} for training, {test} \
         held back. Accuracy is on the held-back rows, from the written model files; the \
         worst component decides. Accepted: MAE ≤ {mae} W or MAPE ≤ {mape} %.</p>",
        p = esc(pipeline),
        src = esc(source),
        rows = r.rows,
        skipped = r.skipped_rows,
        seed = r.seed,
        train = r.train_rows,
        test = r.test_rows,
        mae = r.acceptance.max_mae_w,
        mape = r.acceptance.max_mape_pct,
    );
    if let Some(g) = r.guidance() {
        let _ = write!(s, "<p class=\"no\"><b>{}</b></p>", esc(&g));
    }
    s.push_str("<h2>Idle power removed for DynPower (W)</h2><ul>");
    for (g, idle) in &r.idle_w {
        let parts: Vec<String> = idle.iter().map(|(c, w)| format!("{c} {w:.2}")).collect();
        let _ = write!(s, "<li>{g}: {}</li>", esc(&parts.join(", ")));
    }
    s.push_str(
        "</ul><h2>Models</h2><table><tr><th>output</th><th>group</th><th>model</th>\
         <th>MAE W</th><th>MAPE %</th><th>per component MAE W / MAPE %</th>\
         <th>k-fold MAE W</th><th>fit s</th><th>accepted</th></tr>",
    );
    for m in &r.models {
        let per: Vec<String> = m
            .accuracy
            .components
            .iter()
            .map(|c| format!("{} {:.2}/{}", c.component, c.mae_w, pct(c.mape_pct)))
            .collect();
        let _ =
            write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.4}</td><td class=\"{}\">{}</td></tr>",
            m.output_type,
            m.feature_group,
            esc(&m.name),
            m.accuracy.mae_w,
            pct(m.accuracy.mape_pct),
            esc(&per.join(", ")),
            m.k_fold.as_ref().map_or("".into(), |a| format!("{:.2}", a.mae_w)),
            m.fit_seconds,
            if m.accepted { "yes" } else { "no" },
            if m.accepted { "yes" } else { "no" },
        );
    }
    s.push_str("</table>");
    for m in best_per_group(r) {
        let _ = write!(
            s,
            "<h2>{} {}: {} (MAE {:.2} W)</h2><div>",
            m.output_type,
            m.feature_group,
            esc(&m.name),
            m.accuracy.mae_w
        );
        for (component, pts) in &m.test_points {
            if pts.iter().all(|(y, _)| *y == 0.0) {
                continue;
            }
            s.push_str(&scatter(
                &format!("{component}: predicted vs measured"),
                pts,
                "measured W",
                "predicted W",
                true,
            ));
            let resid: Vec<(f64, f64)> = pts.iter().map(|(y, p)| (*y, p - y)).collect();
            s.push_str(&scatter(
                &format!("{component}: residual"),
                &resid,
                "measured W",
                "predicted − measured W",
                false,
            ));
        }
        s.push_str("</div>");
    }
    s.push_str("</body></html>\n");
    s
}

/// The lowest-MAE model of each (output type, feature group), accepted or not.
fn best_per_group(r: &TrainReport) -> Vec<&TrainedModel> {
    let mut best: Vec<&TrainedModel> = Vec::new();
    for m in &r.models {
        match best
            .iter_mut()
            .find(|b| b.output_type == m.output_type && b.feature_group == m.feature_group)
        {
            Some(b) if m.accuracy.mae_w < b.accuracy.mae_w => *b = m,
            Some(_) => {}
            None => best.push(m),
        }
    }
    best
}

/// A scatter plot with axes and, for predicted-vs-measured, the y = x line (else y = 0),
/// as an `<svg>` element; a note instead when plotters cannot draw it.
fn scatter(title: &str, pts: &[(f64, f64)], xl: &str, yl: &str, diagonal: bool) -> String {
    let finite: Vec<(f64, f64)> = pts
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    let range = |v: &mut dyn Iterator<Item = f64>| {
        let (lo, hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        if lo.is_finite() && hi > lo {
            (lo, hi)
        } else if lo.is_finite() {
            (lo - 1.0, lo + 1.0)
        } else {
            (0.0, 1.0)
        }
    };
    let (mut x0, mut x1) = range(&mut finite.iter().map(|p| p.0));
    let (mut y0, mut y1) = range(&mut finite.iter().map(|p| p.1));
    if diagonal {
        (x0, x1) = (x0.min(y0), x1.max(y1));
        (y0, y1) = (x0, x1);
    }
    let reference = if diagonal {
        Some([(x0, x0), (x1, x1)])
    } else {
        (y0 < 0.0 && y1 > 0.0).then_some([(x0, 0.0), (x1, 0.0)])
    };
    let mut svg = String::new();
    let drawn = draw(
        &mut svg,
        title,
        (x0..x1, y0..y1),
        (xl, yl),
        reference,
        &finite,
    );
    match drawn {
        Ok(()) => svg,
        Err(e) => format!(
            "<p class=\"no\">{}: plot failed: {}</p>",
            esc(title),
            esc(&e)
        ),
    }
}

fn draw(
    svg: &mut String,
    title: &str,
    (xr, yr): (std::ops::Range<f64>, std::ops::Range<f64>),
    (xl, yl): (&str, &str),
    reference: Option<[(f64, f64); 2]>,
    pts: &[(f64, f64)],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::with_string(svg, (W, H)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 17))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(46)
        .build_cartesian_2d(xr, yr)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(xl)
        .y_desc(yl)
        .x_labels(5)
        .y_labels(5)
        .max_light_lines(0)
        .bold_line_style(RGBColor(230, 230, 230))
        .label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    if let Some(line) = reference {
        chart
            .draw_series(LineSeries::new(line, RED))
            .map_err(|e| err(&e))?;
    }
    let dot = RGBColor(31, 95, 168).mix(0.5).filled();
    chart
        .draw_series(pts.iter().map(|p| Circle::new(*p, 2, dot)))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
