//! `kepler probe`: what this host offers, and why each unavailable thing is unavailable.

use std::fmt::Write;

use kepler_core::PowerMeter;

use crate::config::Config;
use crate::setup;

pub fn report(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Usage sources:");
    let procfs = kepler_sources::procfs::probe(&config.host.procfs);
    line(&mut out, "procfs", procfs.map_err(|e| e.to_string()));

    // The agent's own choice of source, loaded once: its features also decide whether the
    // estimation model below can run.
    let usage = setup::usage_source(config, std::sync::Arc::new(kepler_core::Catalogue::new()));
    let (ebpf, selected, features) = match &usage {
        Ok(u) => (
            u.ebpf.clone(),
            u.source.name().to_string(),
            u.source.features(),
        ),
        Err(e) => (
            Err(format!("{e:#}")),
            "none".to_string(),
            vec![kepler_core::Feature::BpfCpuTimeMs],
        ),
    };
    line(&mut out, "ebpf", ebpf);
    let _ = writeln!(out, "  selected: {selected}");

    let order = config.meter_order();
    let _ = writeln!(
        out,
        "\nPower meters (tried in order: {}):",
        order.join(", ")
    );
    let settings = setup::meter_settings(config);
    let host = kepler_sources::HostFacts::read(&config.host.procfs, &config.host.sysfs);
    // Meters are opened only to be described: background work they ask for is dropped.
    let background = kepler_core::Background::new();
    let mut names: Vec<String> = order.clone();
    for extra in kepler_meters::METER_NAMES {
        if !names.iter().any(|n| n == extra) {
            names.push(extra.to_string());
        }
    }
    let mut selected = None;
    for name in &names {
        let outcome = setup::open_meter(config, &settings, name, &features, &host, &background);
        let detail = outcome
            .as_ref()
            .map(|meter| describe(meter.as_ref()))
            .map_err(|e| e.to_string());
        if selected.is_none() && outcome.is_ok() && order.contains(name) {
            selected = Some(name.clone());
        }
        line(&mut out, name, detail);
    }
    let _ = writeln!(out);
    match selected {
        Some(name) => {
            let _ = writeln!(out, "Selected meter: {name}");
        }
        None => {
            let _ = writeln!(
                out,
                "Selected meter: none; the agent exports usage only and /readyz reports not ready"
            );
        }
    }
    out
}

fn describe(meter: &dyn PowerMeter) -> String {
    let mut unique: Vec<String> = Vec::new();
    for z in meter.zones() {
        if !unique.contains(&z) {
            unique.push(z);
        }
    }
    let mut text = format!(
        "zones: {} ({})",
        unique.join(", "),
        meter.provenance().as_str()
    );
    if let Some(model) = meter.estimation_model() {
        text.push_str(&format!(", model {model}"));
    }
    if let Some(detail) = meter.detail() {
        text.push_str(&format!("\n{:27}{detail}", ""));
    }
    text
}

fn line(out: &mut String, name: &str, outcome: Result<String, String>) {
    let _ = match outcome {
        Ok(detail) => writeln!(out, "  {name:<8} available      {detail}"),
        Err(reason) => writeln!(out, "  {name:<8} not available  {reason}"),
    };
}
