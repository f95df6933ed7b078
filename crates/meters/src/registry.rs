//! The registry of power meters, shared by the agent's start-up selection and `kepler probe`:
//! one row per meter with its name, its power domain and how to open it.
//!
//! Each power domain has a fallback chain ([`chains`]): the first meter of the chain that opens
//! is the domain's meter. Adding a meter is one row in `ROWS` plus its module; the row's
//! domain puts it in that domain's chain and in `kepler probe`'s listing.

use std::fmt;
use std::str::FromStr;

use kepler_core::{Background, Feature, PowerDomain, PowerMeter, Unavailable};
use tracing::info;

use crate::gpu::{self, GpuMeter};
use crate::{msr, FakeMeter, HwmonMeter, MeterSettings, MsrMeter, RaplMeter};

/// Opens the estimation meter from the features the usage source provides. The agent supplies
/// it: the model depends on the agent's configuration and on facts about the host that this
/// crate does not read.
pub type OpenEstimator<'a> = dyn Fn(&[Feature]) -> Result<Box<dyn PowerMeter>, Unavailable> + 'a;

/// What opening a meter may use.
pub struct OpenContext<'a> {
    pub settings: &'a MeterSettings,
    /// The features the usage source provides (what an estimation model may use).
    pub features: &'a [Feature],
    /// How to open the `model` meter; `None` leaves it unavailable.
    pub estimator: Option<&'a OpenEstimator<'a>>,
    /// Where slow meters leave their poller for the agent to start (kind `poller` in its
    /// health); `None` (`kepler probe`) makes them ask their device once while opening.
    pub background: Option<&'a Background>,
}

impl<'a> OpenContext<'a> {
    /// A context for the hardware and development meters only.
    pub fn new(settings: &'a MeterSettings) -> Self {
        OpenContext {
            settings,
            features: &[],
            estimator: None,
            background: None,
        }
    }
}

type OpenFn = fn(&OpenContext<'_>) -> Result<Box<dyn PowerMeter>, Unavailable>;

/// One meter of the registry.
pub struct MeterRow {
    /// The name used in configuration (`cpu.preferredMeters`), logs and `kepler probe`; it is
    /// also what the opened meter's [`PowerMeter::name`] returns.
    name: &'static str,
    domain: PowerDomain,
    open: OpenFn,
}

/// Every meter, in the order `kepler probe` lists them and in which the chains of domains
/// without a configured order try them.
static ROWS: &[MeterRow] = &[
    MeterRow {
        name: "rapl",
        domain: PowerDomain::Cpu,
        open: |cx| {
            let s = cx.settings;
            // Without powercap zones, say whether the msr meter could read RAPL instead.
            let meter =
                RaplMeter::open(&s.sysfs, &s.rapl_zones).map_err(|e| match msr::rapl_hint(s) {
                    Some(hint) => Unavailable::new(format!("{}; {hint}", e.reason)),
                    None => e,
                })?;
            Ok(Box::new(meter))
        },
    },
    MeterRow {
        name: MSR,
        domain: PowerDomain::Cpu,
        open: |cx| Ok(Box::new(MsrMeter::open(cx.settings)?)),
    },
    MeterRow {
        name: "hwmon",
        domain: PowerDomain::Cpu,
        open: |cx| {
            let s = cx.settings;
            Ok(Box::new(HwmonMeter::open_with_rules(
                &s.sysfs,
                &s.hwmon_zones,
                &s.hwmon_chip_rules,
            )?))
        },
    },
    MeterRow {
        name: FAKE,
        domain: PowerDomain::Cpu,
        open: |cx| Ok(Box::new(FakeMeter::new(&cx.settings.fake)?)),
    },
    MeterRow {
        name: MODEL,
        domain: PowerDomain::Cpu,
        open: |cx| match cx.estimator {
            Some(open) => open(cx.features),
            None => Err(Unavailable::new("no estimation model is configured")),
        },
    },
    MeterRow {
        name: crate::redfish::NAME,
        domain: PowerDomain::Platform,
        open: |cx| Ok(Box::new(crate::redfish::open(cx)?)),
    },
    MeterRow {
        name: crate::ipmi::NAME,
        domain: PowerDomain::Platform,
        open: |cx| Ok(Box::new(crate::ipmi::open(cx)?)),
    },
    MeterRow {
        name: "acpi",
        domain: PowerDomain::Platform,
        open: |cx| {
            let s = cx.settings;
            Ok(Box::new(HwmonMeter::open_platform(
                &s.sysfs,
                &s.hwmon_zones,
            )?))
        },
    },
    // GPU chain: the scripted devices when `dev.fake-gpu` asks for them, then dcgm-exporter
    // (only with `dcgmEndpoint` set, so a configured endpoint wins over the local NVML, which
    // cannot attribute MIG instances), then the vendors.
    MeterRow {
        name: gpu::fake::NAME,
        domain: PowerDomain::Gpu,
        open: |cx| {
            let g = &cx.settings.gpu;
            let fake = g
                .fake
                .as_ref()
                .ok_or_else(|| Unavailable::new("dev.fake-gpu.enabled is false"))?;
            let backend = gpu::fake::FakeGpu::new(fake.devices.clone());
            if fake.devices.is_empty() {
                return Err(Unavailable::new("dev.fake-gpu lists no devices"));
            }
            Ok(Box::new(GpuMeter::new(
                gpu::fake::NAME,
                Box::new(backend),
                g.idle_power,
            )))
        },
    },
    MeterRow {
        name: gpu::dcgm_poll::NAME,
        domain: PowerDomain::Gpu,
        open: |cx| Ok(Box::new(gpu::dcgm_poll::open(cx)?)),
    },
    MeterRow {
        name: gpu::nvml::NAME,
        domain: PowerDomain::Gpu,
        open: |cx| {
            let g = gpu_enabled(cx)?;
            let backend = gpu::nvml::NvmlGpu::open()?;
            Ok(Box::new(GpuMeter::new(
                gpu::nvml::NAME,
                Box::new(backend),
                g.idle_power,
            )))
        },
    },
    MeterRow {
        name: gpu::amdgpu::NAME,
        domain: PowerDomain::Gpu,
        open: |cx| {
            let g = gpu_enabled(cx)?;
            let s = cx.settings;
            let backend = gpu::amdgpu::AmdGpu::open(&s.sysfs, &s.procfs)?;
            Ok(Box::new(GpuMeter::new(
                gpu::amdgpu::NAME,
                Box::new(backend),
                g.idle_power,
            )))
        },
    },
];

/// GPU meters touch vendor libraries and devices only when asked to (upstream's
/// `experimental.gpu.enabled`).
fn gpu_enabled<'a>(cx: &OpenContext<'a>) -> Result<&'a gpu::GpuSettings, Unavailable> {
    let g = &cx.settings.gpu;
    if g.enabled {
        Ok(g)
    } else {
        Err(Unavailable::new("experimental.gpu.enabled is false"))
    }
}

/// The estimation meter: the CPU chain's last resort.
const MODEL: &str = "model";
/// The development meter: the whole CPU chain when `dev.fake-cpu-meter.enabled` is set.
const FAKE: &str = "fake";
/// RAPL over MSR: joins the CPU chain when `msr.enabled` is set (see [`MeterName::msr`]).
const MSR: &str = "msr";

/// A meter of the registry, as named in configuration. Only names of registry rows parse, so
/// holding one means the meter exists; names are case-insensitive (`RAPL` is `rapl`).
#[derive(Copy, Clone)]
pub struct MeterName(&'static MeterRow);

impl MeterName {
    /// Every meter of the registry, in registry order.
    pub fn all() -> impl Iterator<Item = MeterName> {
        ROWS.iter().map(MeterName)
    }

    /// The meters whose readings belong to `domain`, in registry order.
    pub fn of_domain(domain: PowerDomain) -> impl Iterator<Item = MeterName> {
        MeterName::all().filter(move |m| m.domain() == domain)
    }

    /// The estimation meter.
    pub fn model() -> Option<MeterName> {
        MeterName::lookup(MODEL)
    }

    /// The development meter.
    pub fn fake() -> Option<MeterName> {
        MeterName::lookup(FAKE)
    }

    /// The RAPL-over-MSR meter.
    pub fn msr() -> Option<MeterName> {
        MeterName::lookup(MSR)
    }

    fn lookup(name: &str) -> Option<MeterName> {
        let name = name.trim();
        MeterName::all().find(|m| m.as_str().eq_ignore_ascii_case(name))
    }

    pub fn as_str(self) -> &'static str {
        self.0.name
    }

    pub fn domain(self) -> PowerDomain {
        self.0.domain
    }

    /// Opens the meter, or says why it cannot be used on this host.
    pub fn open(self, cx: &OpenContext<'_>) -> Result<Box<dyn PowerMeter>, Unavailable> {
        (self.0.open)(cx)
    }
}

impl PartialEq for MeterName {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for MeterName {}

impl std::hash::Hash for MeterName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for MeterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for MeterName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A meter name that no registry row has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown meter {name:?} (known: {known})")]
pub struct UnknownMeter {
    /// The name as given.
    pub name: String,
    known: String,
}

impl FromStr for MeterName {
    type Err = UnknownMeter;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MeterName::lookup(s).ok_or_else(|| UnknownMeter {
            name: s.to_string(),
            known: MeterName::all()
                .map(MeterName::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })
    }
}

impl<'de> serde::Deserialize<'de> for MeterName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A power domain's fallback chain: its meters in the order they are tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub domain: PowerDomain,
    pub meters: Vec<MeterName>,
}

/// The chain of every domain. CPU: the development meter alone when `fake_cpu` is set;
/// otherwise `cpu_preferred` (`cpu.preferredMeters`) with the estimation model as the last
/// resort where the list does not place it. Other domains try their registry rows in order.
pub fn chains(cpu_preferred: &[MeterName], fake_cpu: bool) -> Vec<Chain> {
    PowerDomain::ALL
        .into_iter()
        .map(|domain| {
            let meters = match domain {
                PowerDomain::Cpu => cpu_chain(cpu_preferred, fake_cpu),
                other => MeterName::of_domain(other).collect(),
            };
            Chain { domain, meters }
        })
        .collect()
}

fn cpu_chain(preferred: &[MeterName], fake: bool) -> Vec<MeterName> {
    if fake {
        return MeterName::fake().into_iter().collect();
    }
    let mut chain: Vec<MeterName> = Vec::with_capacity(preferred.len() + 1);
    for &meter in preferred {
        // A meter listed twice would only fail (or succeed) twice; try it once.
        if !chain.contains(&meter) {
            chain.push(meter);
        }
    }
    if let Some(model) = MeterName::model().filter(|m| !chain.contains(m)) {
        chain.push(model);
    }
    chain
}

/// One meter tried while selecting, and what came of it: its zones, or why it is unavailable.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    pub domain: PowerDomain,
    pub meter: MeterName,
    pub outcome: Result<Vec<String>, Unavailable>,
}

/// The meters of the tick, at most one per domain, and every meter tried on the way.
pub struct Selection {
    pub meters: Vec<Box<dyn PowerMeter>>,
    pub attempts: Vec<Attempt>,
}

/// Opens, for each chain, the first meter that works; a domain where none does has no meter.
pub fn select(chains: &[Chain], cx: &OpenContext<'_>) -> Selection {
    let mut selection = Selection {
        meters: Vec::new(),
        attempts: Vec::new(),
    };
    for chain in chains {
        for &name in &chain.meters {
            let domain = chain.domain;
            match name.open(cx) {
                Ok(meter) => {
                    let zones = meter.zones();
                    info!(%domain, meter = %name, ?zones, "power meter selected");
                    selection.attempts.push(Attempt {
                        domain,
                        meter: name,
                        outcome: Ok(zones),
                    });
                    selection.meters.push(meter);
                    break;
                }
                Err(reason) => {
                    info!(%domain, meter = %name, %reason, "power meter unavailable");
                    selection.attempts.push(Attempt {
                        domain,
                        meter: name,
                        outcome: Err(reason),
                    });
                }
            }
        }
    }
    selection
}

/// One registry row as probed: the opened meter (for its zones and details), or why not.
pub struct ProbeRow {
    pub meter: MeterName,
    /// Whether the domain's chain tries this meter (else it is listed for information).
    pub in_chain: bool,
    pub outcome: Result<Box<dyn PowerMeter>, Unavailable>,
}

/// Every meter of one domain, probed.
pub struct DomainProbe {
    pub domain: PowerDomain,
    pub chain: Vec<MeterName>,
    /// The chain's meters in order, then the domain's other registry rows.
    pub rows: Vec<ProbeRow>,
    /// The meter [`select`] would take: the first of the chain that opens.
    pub selected: Option<MeterName>,
}

/// Opens every meter of every domain and reports each one; the agent's choice is the first
/// chain member that opens, as in [`select`].
pub fn probe(chains: &[Chain], cx: &OpenContext<'_>) -> Vec<DomainProbe> {
    chains
        .iter()
        .map(|chain| {
            let others = MeterName::of_domain(chain.domain).filter(|m| !chain.meters.contains(m));
            let rows: Vec<ProbeRow> = chain
                .meters
                .iter()
                .map(|&m| (m, true))
                .chain(others.map(|m| (m, false)))
                .map(|(meter, in_chain)| ProbeRow {
                    meter,
                    in_chain,
                    outcome: meter.open(cx),
                })
                .collect();
            let selected = rows
                .iter()
                .find(|r| r.in_chain && r.outcome.is_ok())
                .map(|r| r.meter);
            DomainProbe {
                domain: chain.domain,
                chain: chain.meters.clone(),
                rows,
                selected,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_roles_exist() {
        let names: Vec<&str> = MeterName::all().map(MeterName::as_str).collect();
        for (i, name) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(name), "{name} is listed twice");
            assert_eq!(name.to_ascii_lowercase(), *name, "names are lower case");
        }
        let gpu: Vec<&str> = MeterName::of_domain(PowerDomain::Gpu)
            .map(MeterName::as_str)
            .collect();
        assert_eq!(gpu, ["fake-gpu", "dcgm", "nvml", "amdgpu"]);
        assert_eq!(MeterName::model().map(MeterName::as_str), Some(MODEL));
        assert_eq!(MeterName::fake().map(MeterName::as_str), Some(FAKE));
    }

    #[test]
    fn unknown_names_do_not_parse() {
        let err = "tpu".parse::<MeterName>().unwrap_err();
        assert_eq!(err.name, "tpu");
        assert_eq!(
            err.to_string(),
            "unknown meter \"tpu\" (known: rapl, msr, hwmon, fake, model, redfish, ipmi, acpi, fake-gpu, dcgm, nvml, amdgpu)"
        );
    }
}
