//! The expected error of estimated zones: exported per zone beside the estimate, never for
//! measured zones.

mod support;

use std::sync::Arc;

use kepler_core::{ExpectedError, Provenance, Watts, ZoneMeta};
use kepler_exporters::{encode, Format};

fn render(snapshot: &kepler_core::PowerSnapshot) -> String {
    let mut out = Vec::new();
    encode(
        Some(snapshot),
        &support::context(),
        Format::Text004,
        &mut out,
    );
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn estimated_zones_export_their_expected_error_and_measured_ones_none() {
    let measured = render(&support::snapshot());
    assert!(!measured.contains("estimate_error"), "{measured}");

    let mut snapshot = support::snapshot();
    let estimated = Arc::new(ZoneMeta {
        provenance: Provenance::Estimated,
        model: Some("builtin/aws/fallback".into()),
        // Only package states one: dram must get no series rather than a made-up one.
        expected_error: Arc::from([ExpectedError {
            zone: "package".into(),
            mae: Watts(22.3),
            mape: 0.247,
        }]),
        ..ZoneMeta::measured("model")
    });
    for z in &mut snapshot.zones {
        z.meta = estimated.clone();
    }
    let text = render(&snapshot);
    let labels = r#"zone="package",path="/sys/class/powercap/intel-rapl:0",model="builtin/aws/fallback",node_name="node-1""#;
    for line in [
        format!("kepler_node_cpu_zone_estimate_error_watts{{{labels}}} 22.3"),
        format!("kepler_node_cpu_zone_estimate_error_ratio{{{labels}}} 0.247"),
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("kepler_node_cpu_zone_estimate_error"))
            .count(),
        2,
        "{text}"
    );
    assert!(text.contains("# TYPE kepler_node_cpu_zone_estimate_error_watts gauge"));
}
