//! Fuzz targets for what the meters read from outside: sysfs attribute text (powercap
//! `energy_uj`/`max_energy_range_uj`, hwmon `power*_input`/`in*_input`/`curr*_input`), MSR
//! register values, `ipmitool dcmi power reading` output and Redfish JSON, plus core's counter
//! arithmetic that turns those numbers into energy. `KEPLER_FUZZ_CASES` sets the cases per
//! target (docs/security.md records the long local runs).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::energy::counter_delta;
use kepler_core::plausible::plausible_wrap;
use kepler_core::{EnergyLimits, MicroJoules, Watts};
use kepler_testkit::fuzz::{edits, mutate_text};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::msr::EnergyUnit;
use crate::redfish::power::{collect, Fetch, MAX_REQUESTS};
use crate::redfish::RedfishError;
use crate::sysfs::parse_trimmed;

/// A fake BMC: every path the generated documents link to answers one of them.
struct Documents {
    docs: Vec<Value>,
    calls: usize,
}

impl Fetch for Documents {
    fn get(&mut self, path: &str) -> Result<Value, RedfishError> {
        self.calls += 1;
        let i = path.bytes().map(usize::from).sum::<usize>() % self.docs.len().max(1);
        self.docs.get(i).cloned().ok_or(RedfishError::NoReading)
    }
}

const PATHS: [&str; 6] = [
    "/redfish/v1/Chassis",
    "/redfish/v1/Chassis/1",
    "/redfish/v1/Chassis/1/Power",
    "/redfish/v1/Chassis/1/PowerSubsystem",
    "/redfish/v1/Chassis/1/PowerSubsystem/PowerSupplies/0",
    "/redfish/v1/Chassis/2/",
];

/// JSON shaped like Redfish: the keys the meter reads, links among a few paths, and readings
/// that are numbers of every kind, strings, or nested objects.
fn redfish_value() -> impl Strategy<Value = Value> {
    let number = prop_oneof![
        (0.0f64..5000.0).prop_map(|w| json!(w)),
        any::<f64>().prop_map(|w| json!(w)),
        any::<i64>().prop_map(|w| json!(w)),
        any::<u64>().prop_map(|w| json!(w)),
        Just(Value::Null),
        "[0-9.e-]{0,8}".prop_map(Value::String),
    ];
    let link = prop::sample::select(PATHS.to_vec()).prop_map(|p| json!({ "@odata.id": p }));
    let leaf = prop_oneof![number, link];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "Members",
                        "@odata.id",
                        "Id",
                        "Name",
                        "MemberId",
                        "PowerSubsystem",
                        "PowerSupplies",
                        "PowerOutputWatts",
                        "Metrics",
                        "OutputPowerWatts",
                        "Reading",
                        "Power",
                        "PowerControl",
                        "PowerConsumedWatts",
                        "PhysicalContext",
                        "Links",
                        "ContainedBy",
                        "Chassis",
                        "PowerSupply",
                    ]),
                    inner,
                ),
                0..6,
            )
            .prop_map(|pairs| {
                Value::Object(
                    pairs
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(4096))]

    /// powercap and hwmon attribute text: a value the kernel writes reads back exactly, and
    /// anything else is a typed error quoting at most 64 characters of the file.
    #[test]
    fn sysfs_values(
        value in any::<u64>(),
        signed in any::<i64>(),
        edits in edits(),
        junk in "\\PC{0,300}",
    ) {
        let path = Path::new("/sys/class/powercap/intel-rapl:0/energy_uj");
        prop_assert_eq!(parse_trimmed::<u64>(path, &format!("{value}\n"), "u64").ok(), Some(value));
        prop_assert_eq!(parse_trimmed::<i64>(path, &format!("{signed}\n"), "i64").ok(), Some(signed));
        for text in [mutate_text(&format!("{value}\n"), &edits), junk] {
            match parse_trimmed::<u64>(path, &text, "an unsigned integer") {
                Ok(v) => prop_assert_eq!(Ok(v), text.trim().parse::<u64>()),
                Err(e) => {
                    let message = e.to_string();
                    prop_assert!(message.contains("energy_uj") && message.contains("an unsigned integer"));
                    prop_assert!(message.chars().count() < 64 * 4 + 120, "{message}");
                }
            }
        }
    }

    /// Counter deltas: never more than one wrap's worth, never a panic, and an implausible
    /// delta is refused by the power ceiling.
    #[test]
    fn energy_counters(
        previous in prop_oneof![any::<u64>(), 0u64..1_000_000],
        current in prop_oneof![any::<u64>(), 0u64..1_000_000],
        max in prop_oneof![Just(None), any::<u64>().prop_map(Some), (0u64..2_000_000_000).prop_map(Some)],
        interval_ms in 0u64..100_000,
    ) {
        let path: Arc<str> = "energy_uj".into();
        let got = counter_delta(&path, MicroJoules(previous), MicroJoules(current), max.map(MicroJoules));
        if let Ok(delta) = got {
            if current >= previous {
                prop_assert_eq!(delta.0, current - previous);
            } else {
                let max = max.unwrap_or(0);
                prop_assert!(max > 0 && previous <= max && current <= max);
                prop_assert_eq!(Some(delta.0), (max - previous).checked_add(current).and_then(|d| d.checked_add(1)));
            }
            let interval = Duration::from_millis(interval_ms);
            let limits = EnergyLimits::default();
            if limits.check_energy(delta, interval).is_ok() {
                prop_assert!(delta <= limits.max_energy(interval));
            }
        }
        // Any three numbers, even inconsistent ones, give an answer rather than a panic.
        if let Some(d) = plausible_wrap(previous, current, max.unwrap_or(0)) {
            prop_assert!(d > 0);
        }
    }

    /// MSR unit and counter registers: any 64-bit value.
    #[test]
    fn msr_registers(unit in any::<u64>(), count in any::<u32>()) {
        if let Some(unit) = EnergyUnit::from_unit_register(unit) {
            let uj = unit.micro_joules(count);
            prop_assert!(uj <= unit.wrap_max());
            prop_assert!(unit.micro_joules_per_count() > 0.0);
            prop_assert!(unit.wrap_time_at_max_power() > Duration::ZERO);
        }
    }

    #[test]
    fn ipmi_dcmi_output(
        current in prop_oneof![0.0f64..5000.0, any::<f64>()],
        minimum in 0u32..5000,
        state in prop::sample::select(vec!["activated", "deactivated", "Activated", ""]),
        unit in prop::sample::select(vec!["Watts", "watts", "W", ""]),
        edits in edits(),
        junk in "\\PC{0,300}",
    ) {
        let output = format!(
            "\n    Instantaneous power reading:   {current} {unit}\n    Minimum during sampling period: \
             {minimum} Watts\n    IPMI timestamp:   Tue Nov 24 18:00:00 2026\n    Power reading state is: {state}\n"
        );
        let parsed = crate::ipmi::parse::parse(&output);
        let valid = current.is_finite() && current >= 0.0
            && unit.eq_ignore_ascii_case("watts") && state.eq_ignore_ascii_case("activated");
        if valid {
            prop_assert_eq!(parsed.map(|r| (r.current, r.minimum)), Ok((current, Some(f64::from(minimum)))));
        } else {
            prop_assert!(parsed.is_err());
        }
        for text in [mutate_text(&output, &edits), junk] {
            if let Ok(r) = crate::ipmi::parse::parse(&text) {
                for w in [Some(r.current), r.minimum, r.maximum, r.average].into_iter().flatten() {
                    prop_assert!(w.is_finite() && w >= 0.0, "{w} from {text:?}");
                }
            }
        }
    }

    /// The Redfish BMC file: its password, wherever it lands, never appears in an error.
    #[test]
    fn redfish_bmc_file(
        layout in 0usize..6,
        password in "[A-Za-z0-9]{6,12}",
        edits in edits(),
    ) {
        let password = format!("Pw{password}");
        let text = match layout {
            0 => format!("nodes: {{n: b}}\nbmcs:\n  b:\n    endpoint: https://h\n    password: {password}\n"),
            1 => format!("nodes: {{n: b}}\nbmcs:\n  b: {password}\n"),
            2 => format!("nodes: {{n: b}}\nbmcs:\n  b:\n    endpoint: https://h\n    username: [{password}]\n"),
            3 => format!("nodes: {password}\nbmcs: {{}}\n"),
            4 => format!("nodes: {{n: b}}\nbmcs:\n  b:\n    endpoint: https://h\n    insecure: {password}\n"),
            _ => format!("nodes: {{n: b}}\nbmcs:\n  b:\n    endpoint: https://{password}@h\n"),
        };
        for (mutated, text) in [(false, text.clone()), (true, mutate_text(&text, &edits))] {
            match crate::redfish::bmc::parse(&text, "bmc.yaml", "n") {
                // A mutation can fold the password into another field's value (the endpoint
                // as a multi-line scalar): that is the file's text, not a leak.
                Ok((_, bmc)) if !mutated => {
                    let shown = format!("{bmc:?}");
                    prop_assert!(!shown.contains(&password), "{shown}");
                }
                Ok(_) => {}
                // Likewise a mutation can make it a node or BMC name, which errors quote;
                // serde's own messages must never quote it.
                Err(e) if mutated && !matches!(e, crate::redfish::bmc::BmcFileError::Parse { .. }) => {}
                Err(e) => prop_assert!(!e.to_string().contains(&password), "{e}"),
            }
        }
    }

    /// Redfish: whatever the BMC answers, the meter makes a bounded number of requests and
    /// reports only finite, non-negative watts.
    #[test]
    fn redfish_answers(docs in prop::collection::vec(redfish_value(), 1..7)) {
        let mut fetch = Documents { docs, calls: 0 };
        let polled = collect(&mut fetch, "bmc");
        prop_assert!(fetch.calls <= MAX_REQUESTS);
        if let Ok(polled) = polled {
            for p in &polled.platform {
                prop_assert!(p.watts.0.is_finite() && p.watts.0 >= 0.0);
            }
            for r in &polled.readings {
                if let kepler_core::ZoneSample::Power(Watts(w)) = r.sample {
                    prop_assert!(w.is_finite() && w >= 0.0);
                }
            }
        }
    }
}
