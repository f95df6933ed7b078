//! The training report: one self-contained HTML page (inline SVG, no scripts, no external
//! files) with every model's accuracy and, for the best model of each output type and
//! feature group, predicted-vs-measured and residual plots per component.
//!
//! The plots are drawn as SVG here rather than with a plotting crate: two scatter kinds
//! with axes need ~100 lines, while plotters' SVG text layout pulls in font handling.

use std::fmt::Write;

use kepler_models::train::{TrainReport, TrainedModel};

const W: f64 = 360.0;
const H: f64 = 260.0;
const PAD: f64 = 44.0;

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

/// A scatter plot with axes, tick labels at both ends and, for predicted-vs-measured, the
/// y = x line.
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
    let sx = |x: f64| PAD + (x - x0) / (x1 - x0) * (W - PAD - 10.0);
    let sy = |y: f64| H - PAD - (y - y0) / (y1 - y0) * (H - PAD - 24.0);
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         font-size=\"10\"><text x=\"{}\" y=\"14\" text-anchor=\"middle\" font-size=\"12\">{}</text>\
         <line x1=\"{PAD}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#000\"/>\
         <line x1=\"{PAD}\" y1=\"24\" x2=\"{PAD}\" y2=\"{b}\" stroke=\"#000\"/>\
         <text x=\"{PAD}\" y=\"{t1}\">{x0:.1}</text><text x=\"{r}\" y=\"{t1}\" text-anchor=\"end\">{x1:.1}</text>\
         <text x=\"{}\" y=\"{t2}\" text-anchor=\"middle\">{}</text>\
         <text x=\"{l}\" y=\"{b}\" text-anchor=\"end\">{y0:.1}</text><text x=\"{l}\" y=\"30\" text-anchor=\"end\">{y1:.1}</text>\
         <text transform=\"translate(10 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        W / 2.0,
        esc(title),
        (PAD + W - 10.0) / 2.0,
        esc(xl),
        (H - PAD + 24.0) / 2.0,
        esc(yl),
        b = H - PAD,
        r = W - 10.0,
        t1 = H - PAD + 12.0,
        t2 = H - PAD + 26.0,
        l = PAD - 2.0,
    );
    if diagonal {
        let _ = write!(
            s,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#c00\"/>",
            sx(x0),
            sy(x0),
            sx(x1),
            sy(x1)
        );
    } else if y0 < 0.0 && y1 > 0.0 {
        let _ = write!(
            s,
            "<line x1=\"{PAD}\" y1=\"{z}\" x2=\"{}\" y2=\"{z}\" stroke=\"#c00\"/>",
            W - 10.0,
            z = sy(0.0)
        );
    }
    for (x, y) in &finite {
        let _ = write!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"1.6\" fill=\"#1f5fa8\" fill-opacity=\"0.5\"/>",
            sx(*x),
            sy(*y)
        );
    }
    s.push_str("</svg>");
    s
}
