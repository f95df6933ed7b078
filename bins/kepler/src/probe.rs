//! `kepler probe`: what this host offers, and why each unavailable thing is unavailable.

use std::fmt::Write;

use kepler_meters::ProbeReport;

use crate::config::Config;
use crate::setup;

pub fn report(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Usage sources:");
    let procfs = kepler_sources::procfs::probe(&config.host.procfs);
    line(&mut out, "procfs", procfs.map_err(|e| e.to_string()));

    let order = config.meter_order();
    let _ = writeln!(
        out,
        "\nPower meters (tried in order: {}):",
        order.join(", ")
    );
    let settings = setup::meter_settings(config);
    let mut names: Vec<&str> = order.iter().map(String::as_str).collect();
    for extra in kepler_meters::METER_NAMES {
        if !names.contains(&extra) {
            names.push(extra);
        }
    }
    let reports = kepler_meters::probe(&names, &settings);
    for r in &reports {
        line(&mut out, &r.name, describe(r));
    }
    let selected = reports
        .iter()
        .filter(|r| order.contains(&r.name))
        .find(|r| r.outcome.is_ok());
    let _ = writeln!(out);
    match selected {
        Some(r) => {
            let _ = writeln!(out, "Selected meter: {}", r.name);
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

fn describe(r: &ProbeReport) -> Result<String, String> {
    match &r.outcome {
        Ok(zones) => {
            let mut unique: Vec<&str> = Vec::new();
            for z in zones {
                if !unique.contains(&z.as_str()) {
                    unique.push(z);
                }
            }
            Ok(format!("zones: {}", unique.join(", ")))
        }
        Err(e) => Err(e.to_string()),
    }
}

fn line(out: &mut String, name: &str, outcome: Result<String, String>) {
    let _ = match outcome {
        Ok(detail) => writeln!(out, "  {name:<8} available      {detail}"),
        Err(reason) => writeln!(out, "  {name:<8} not available  {reason}"),
    };
}
