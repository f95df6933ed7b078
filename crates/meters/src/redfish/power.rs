//! From Redfish resources to readings: which chassis, which power supplies or power controls,
//! and which of them add up to the node's `platform` zone. Pure but for the [`Fetch`] it is
//! given, so the walk is tested on plain JSON.
//!
//! Per chassis, the power supplies of `PowerSubsystem` (`PowerOutputWatts`, or the output
//! power of their `Metrics`) are summed; a chassis without them falls back to the deprecated
//! `Power` resource's `PowerControl[*].PowerConsumedWatts`. Every reading is exported in
//! `kepler_platform_watts`, but the zone avoids counting one watt twice:
//! - a power control whose `PhysicalContext` names a part of the machine (CPU, memory, ...)
//!   is a share of the chassis total, not an addition to it; only whole-chassis controls
//!   (no context, or `Chassis`) count, else the first control with a reading;
//! - a chassis contained (`Links.ContainedBy`) by another chassis that has readings is inside
//!   that chassis's total (a backplane inside its server).

use std::sync::Arc;

use kepler_core::{PlatformLabels, PlatformPower, Watts, ZoneReading};
use serde_json::Value;

use super::RedfishError;
use crate::polled::Polled;

/// The zone every Redfish reading feeds.
pub const ZONE: &str = "platform";
/// More chassis or power supplies than this is not a server: the walk stops there, so a
/// misbehaving BMC cannot keep the poller busy without end.
pub const MAX_MEMBERS: usize = 32;

/// The most GETs one poll makes. A server with a few chassis and supplies needs a dozen; a
/// BMC whose links go on and on is cut off here rather than keeping the poller busy.
pub const MAX_REQUESTS: usize = 128;

/// GETs one Redfish resource by its `@odata.id` path.
pub trait Fetch {
    fn get(&mut self, path: &str) -> Result<Value, RedfishError>;
}

/// A [`Fetch`] that refuses to make more than [`MAX_REQUESTS`] requests.
struct Budget<'f> {
    inner: &'f mut dyn Fetch,
    left: usize,
}

impl Fetch for Budget<'_> {
    fn get(&mut self, path: &str) -> Result<Value, RedfishError> {
        self.left = self.left.checked_sub(1).ok_or(RedfishError::Answer {
            path: path.to_string(),
            message: format!("more than {MAX_REQUESTS} resources to read in one poll"),
        })?;
        self.inner.get(path)
    }
}

struct Source {
    path: String,
    labels: PlatformLabels,
    watts: f64,
    /// Whether it adds to the chassis total (see the module docs).
    counted: bool,
}

struct Chassis {
    odata_id: String,
    contained_by: Option<String>,
    sources: Vec<Source>,
}

/// Reads every chassis of the BMC. A chassis that fails is skipped when others answer (as
/// upstream does); the poll fails when none has a reading.
pub fn collect(fetch: &mut dyn Fetch, bmc_id: &str) -> Result<Polled, RedfishError> {
    let fetch = &mut Budget {
        inner: fetch,
        left: MAX_REQUESTS,
    };
    let list = fetch.get("/redfish/v1/Chassis")?;
    let mut chassis = Vec::new();
    let mut first_error = None;
    for uri in members(&list, "Members") {
        match read_chassis(fetch, bmc_id, &uri) {
            Ok(c) if !c.sources.is_empty() => chassis.push(c),
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if chassis.is_empty() {
        return Err(first_error.unwrap_or(RedfishError::NoReading));
    }
    let with_readings: Vec<String> = chassis.iter().map(|c| c.odata_id.clone()).collect();
    let mut polled = Polled::default();
    for c in chassis {
        let nested = c
            .contained_by
            .as_ref()
            .is_some_and(|outer| with_readings.contains(outer));
        for s in c.sources {
            if s.counted && !nested {
                polled.readings.push(ZoneReading::power(
                    ZONE.into(),
                    s.path.into(),
                    Watts(s.watts),
                ));
            }
            polled.platform.push(PlatformPower {
                labels: Arc::new(s.labels),
                watts: Watts(s.watts),
            });
        }
    }
    Ok(polled)
}

fn read_chassis(fetch: &mut dyn Fetch, bmc_id: &str, uri: &str) -> Result<Chassis, RedfishError> {
    let c = fetch.get(uri)?;
    let chassis_id = text(&c, "Id").unwrap_or_else(|| last_segment(uri));
    let contained_by = c
        .get("Links")
        .and_then(|l| l.get("ContainedBy"))
        .and_then(odata_id);
    let label = |id: String, name: String, kind: &str| PlatformLabels {
        source: "redfish".into(),
        bmc_id: bmc_id.to_string(),
        chassis_id: chassis_id.clone(),
        source_id: id,
        source_name: name,
        source_type: kind.into(),
    };
    let mut sources = Vec::new();
    if let Some(subsystem) = c.get("PowerSubsystem").and_then(odata_id) {
        let subsystem = fetch.get(&subsystem)?;
        if let Some(list) = subsystem.get("PowerSupplies").and_then(odata_id) {
            let list = fetch.get(&list)?;
            for psu_uri in members(&list, "Members") {
                let psu = fetch.get(&psu_uri)?;
                let Some(watts) = psu_output(fetch, &psu)? else {
                    continue;
                };
                let id = text(&psu, "Id").unwrap_or_else(|| last_segment(&psu_uri));
                let name = text(&psu, "Name").unwrap_or_default();
                sources.push(Source {
                    path: format!("{bmc_id}:{psu_uri}"),
                    labels: label(id, name, "PowerSupply"),
                    watts,
                    counted: true,
                });
            }
        }
    }
    if sources.is_empty() {
        if let Some(power_uri) = c.get("Power").and_then(odata_id) {
            let power = fetch.get(&power_uri)?;
            sources = power_controls(&power, &power_uri, bmc_id, label);
        }
    }
    Ok(Chassis {
        odata_id: uri.to_string(),
        contained_by,
        sources,
    })
}

/// A power supply's output: `PowerOutputWatts` (a number, or a sensor excerpt with
/// `Reading`), else `OutputPowerWatts` of its `Metrics` resource. `None` for an absent or
/// silent supply.
fn psu_output(fetch: &mut dyn Fetch, psu: &Value) -> Result<Option<f64>, RedfishError> {
    if let Some(w) = psu.get("PowerOutputWatts").and_then(reading) {
        return Ok(Some(w));
    }
    let Some(metrics) = psu.get("Metrics").and_then(odata_id) else {
        return Ok(None);
    };
    let metrics = fetch.get(&metrics)?;
    Ok(metrics.get("OutputPowerWatts").and_then(reading))
}

fn power_controls(
    power: &Value,
    power_uri: &str,
    bmc_id: &str,
    label: impl Fn(String, String, &str) -> PlatformLabels,
) -> Vec<Source> {
    let Some(controls) = power.get("PowerControl").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut sources: Vec<Source> = controls
        .iter()
        .take(MAX_MEMBERS)
        .enumerate()
        .filter_map(|(i, pc)| {
            let watts = pc.get("PowerConsumedWatts").and_then(reading)?;
            let whole = match pc.get("PhysicalContext").and_then(Value::as_str) {
                None => true,
                Some(context) => context == "Chassis",
            };
            let id = text(pc, "MemberId").unwrap_or_else(|| i.to_string());
            let path = odata_id(pc).unwrap_or_else(|| format!("{power_uri}#/PowerControl/{i}"));
            Some(Source {
                path: format!("{bmc_id}:{path}"),
                labels: label(id, text(pc, "Name").unwrap_or_default(), "PowerControl"),
                watts,
                counted: whole,
            })
        })
        .collect();
    if !sources.iter().any(|s| s.counted) {
        if let Some(first) = sources.first_mut() {
            first.counted = true;
        }
    }
    sources
}

/// A non-negative, finite number of watts: a plain number or a sensor excerpt's `Reading`.
fn reading(v: &Value) -> Option<f64> {
    let n = match v {
        Value::Object(o) => o.get("Reading").and_then(Value::as_f64),
        other => other.as_f64(),
    }?;
    (n.is_finite() && n >= 0.0).then_some(n)
}

fn odata_id(v: &Value) -> Option<String> {
    v.get("@odata.id")
        .and_then(Value::as_str)
        .map(|s| s.trim_end_matches('/').to_string())
        .filter(|s| !s.is_empty())
}

fn members(collection: &Value, key: &str) -> Vec<String> {
    collection
        .get(key)
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(odata_id).take(MAX_MEMBERS).collect())
        .unwrap_or_default()
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(|t| match t {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    })
}

fn last_segment(uri: &str) -> String {
    uri.rsplit('/').next().unwrap_or(uri).to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    struct Map(HashMap<&'static str, Value>);

    impl Fetch for Map {
        fn get(&mut self, path: &str) -> Result<Value, RedfishError> {
            self.0.get(path).cloned().ok_or(RedfishError::Status {
                path: path.to_string(),
                status: 404,
            })
        }
    }

    fn zone_sum(p: &Polled) -> f64 {
        p.readings
            .iter()
            .map(|r| match r.sample {
                kepler_core::ZoneSample::Power(w) => w.0,
                _ => f64::NAN,
            })
            .sum()
    }

    #[test]
    fn power_supplies_are_summed_and_nested_chassis_not_counted_twice() {
        let mut bmc = Map(HashMap::from([
            (
                "/redfish/v1/Chassis",
                json!({"Members": [
                {"@odata.id": "/redfish/v1/Chassis/1"}, {"@odata.id": "/redfish/v1/Chassis/BP"}]}),
            ),
            (
                "/redfish/v1/Chassis/1",
                json!({"Id": "1",
                "PowerSubsystem": {"@odata.id": "/redfish/v1/Chassis/1/PowerSubsystem"},
                "Power": {"@odata.id": "/redfish/v1/Chassis/1/Power"}}),
            ),
            (
                "/redfish/v1/Chassis/1/PowerSubsystem",
                json!({
                "PowerSupplies": {"@odata.id": "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies"}}),
            ),
            (
                "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies",
                json!({"Members": [
                {"@odata.id": "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/A"},
                {"@odata.id": "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/B"},
                {"@odata.id": "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/C"}]}),
            ),
            (
                "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/A",
                json!({"Id": "A", "Name": "PSU A", "PowerOutputWatts": 150.5}),
            ),
            (
                "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/B",
                json!({"Id": "B", "Name": "PSU B", "Metrics": {"@odata.id": "/m/B"}}),
            ),
            ("/m/B", json!({"OutputPowerWatts": {"Reading": 100.0}})),
            // An empty bay: no reading, no source.
            (
                "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/C",
                json!({"Id": "C", "PowerOutputWatts": null}),
            ),
            (
                "/redfish/v1/Chassis/BP",
                json!({"Id": "BP",
                "Links": {"ContainedBy": {"@odata.id": "/redfish/v1/Chassis/1"}},
                "Power": {"@odata.id": "/redfish/v1/Chassis/BP/Power"}}),
            ),
            (
                "/redfish/v1/Chassis/BP/Power",
                json!({"PowerControl": [
                {"MemberId": "0", "Name": "Backplane", "PowerConsumedWatts": 20}]}),
            ),
        ]));
        let polled = collect(&mut bmc, "bmc-1").unwrap();
        assert_eq!(zone_sum(&polled), 250.5);
        assert_eq!(polled.readings.len(), 2);
        assert_eq!(
            &*polled.readings[0].path,
            "bmc-1:/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/A"
        );
        let labels: Vec<(&str, &str, &str, f64)> = polled
            .platform
            .iter()
            .map(|p| {
                let l = &p.labels;
                (&*l.chassis_id, &*l.source_id, &*l.source_type, p.watts.0)
            })
            .collect();
        assert_eq!(
            labels,
            vec![
                ("1", "A", "PowerSupply", 150.5),
                ("1", "B", "PowerSupply", 100.0),
                ("BP", "0", "PowerControl", 20.0)
            ]
        );
    }

    #[test]
    fn power_control_sub_domains_are_detail_only() {
        let mut bmc = Map(HashMap::from([
            (
                "/redfish/v1/Chassis",
                json!({"Members": [{"@odata.id": "/redfish/v1/Chassis/S"}]}),
            ),
            (
                "/redfish/v1/Chassis/S",
                json!({"Power": {"@odata.id": "/redfish/v1/Chassis/S/Power"}}),
            ),
            (
                "/redfish/v1/Chassis/S/Power",
                json!({"PowerControl": [
                {"MemberId": "PC1", "Name": "Server", "PowerConsumedWatts": 400, "PhysicalContext": "Chassis"},
                {"MemberId": "PC2", "Name": "CPU", "PowerConsumedWatts": 120, "PhysicalContext": "CPU"},
                {"MemberId": "PC3", "Name": "broken", "PowerConsumedWatts": -5},
                {"MemberId": "PC4", "Name": "text", "PowerConsumedWatts": "12"}]}),
            ),
        ]));
        let polled = collect(&mut bmc, "b").unwrap();
        assert_eq!(zone_sum(&polled), 400.0);
        assert_eq!(polled.platform.len(), 2);
        assert_eq!(polled.platform[0].labels.chassis_id, "S");
    }

    #[test]
    fn no_reading_anywhere_is_an_error_and_one_bad_chassis_is_skipped() {
        let mut empty = Map(HashMap::from([
            (
                "/redfish/v1/Chassis",
                json!({"Members": [{"@odata.id": "/redfish/v1/Chassis/X"}]}),
            ),
            ("/redfish/v1/Chassis/X", json!({"Id": "X"})),
        ]));
        assert!(matches!(
            collect(&mut empty, "b"),
            Err(RedfishError::NoReading)
        ));
        let mut one_bad = Map(HashMap::from([
            (
                "/redfish/v1/Chassis",
                json!({"Members": [
                {"@odata.id": "/redfish/v1/Chassis/gone"}, {"@odata.id": "/redfish/v1/Chassis/S"}, 7]}),
            ),
            (
                "/redfish/v1/Chassis/S",
                json!({"Power": {"@odata.id": "/p"}}),
            ),
            (
                "/p",
                json!({"PowerControl": [{"PowerConsumedWatts": 90.0}]}),
            ),
        ]));
        let polled = collect(&mut one_bad, "b").unwrap();
        assert_eq!(zone_sum(&polled), 90.0);
        let mut garbage = Map(HashMap::from([("/redfish/v1/Chassis", json!([1, 2]))]));
        assert!(collect(&mut garbage, "b").is_err());
    }

    /// A BMC that lists every resource as a chassis of 32 supplies without readings.
    struct Endless(usize);

    impl Fetch for Endless {
        fn get(&mut self, _: &str) -> Result<Value, RedfishError> {
            self.0 += 1;
            let members: Vec<Value> = (0..MAX_MEMBERS)
                .map(|i| json!({"@odata.id": format!("/x/{i}")}))
                .collect();
            Ok(json!({"Members": members,
                      "PowerSubsystem": {"@odata.id": "/s"}, "PowerSupplies": {"@odata.id": "/l"}}))
        }
    }

    #[test]
    fn one_poll_makes_a_bounded_number_of_requests() {
        let mut bmc = Endless(0);
        let error = collect(&mut bmc, "b").unwrap_err().to_string();
        assert!(error.contains("more than 128 resources"), "{error}");
        assert_eq!(bmc.0, MAX_REQUESTS);
    }
}
