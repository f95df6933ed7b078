//! The training workload: a list of phases, each an idle stretch or one `stress-ng` run, and
//! the command line that runs each.
//!
//! The plan is a pure function of the options and the CPU count, so that a restarted
//! `collect` rebuilds the same plan and continues where its file ends.

use std::fmt;
use std::time::Duration;

/// A stress-ng stressor the plan can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Stressor {
    /// Floating-point and integer work (`--cpu`); the only one `--cpu-load` throttles.
    Cpu,
    /// CPU cache thrashing (`--cache`).
    Cache,
    /// Matrix arithmetic (`--matrix`).
    Matrix,
    /// Memory allocation and writes (`--vm`).
    Vm,
    /// Buffered writes flushed with sync (`--io`).
    Io,
}

impl Stressor {
    fn name(self) -> &'static str {
        match self {
            Stressor::Cpu => "cpu",
            Stressor::Cache => "cache",
            Stressor::Matrix => "matrix",
            Stressor::Vm => "vm",
            Stressor::Io => "io",
        }
    }
}

/// One phase of the plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    Idle {
        duration: Duration,
    },
    Stress {
        stressor: Stressor,
        instances: u32,
        /// Percent of each instance's time busy (`--cpu-load`); only for [`Stressor::Cpu`].
        load: Option<u8>,
        /// A cap on every CPU's frequency in kHz for the phase, where cpufreq is writable.
        freq_cap_khz: Option<u64>,
        duration: Duration,
    },
}

impl Phase {
    pub fn duration(&self) -> Duration {
        match self {
            Phase::Idle { duration } | Phase::Stress { duration, .. } => *duration,
        }
    }

    pub fn freq_cap_khz(&self) -> Option<u64> {
        match self {
            Phase::Idle { .. } => None,
            Phase::Stress { freq_cap_khz, .. } => *freq_cap_khz,
        }
    }

    /// The stress-ng arguments of a stress phase; `None` for idle.
    pub fn stress_ng_args(&self) -> Option<Vec<String>> {
        let Phase::Stress {
            stressor,
            instances,
            load,
            duration,
            ..
        } = self
        else {
            return None;
        };
        let mut args = vec![
            format!("--{}", stressor.name()),
            instances.to_string(),
            "--timeout".into(),
            // Whole seconds, at least 1: stress-ng's timeout granularity.
            format!("{}s", duration.as_secs().max(1)),
            "--quiet".into(),
        ];
        if let Some(l) = load {
            args.extend(["--cpu-load".into(), l.to_string()]);
        }
        if *stressor == Stressor::Vm {
            // Per instance; small enough that N instances fit any node worth measuring.
            args.extend(["--vm-bytes".into(), "256M".into()]);
        }
        Some(args)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Idle { duration } => write!(f, "idle {}s", duration.as_secs_f64()),
            Phase::Stress {
                stressor,
                instances,
                load,
                freq_cap_khz,
                duration,
            } => {
                write!(f, "{} ×{instances}", stressor.name())?;
                if let Some(l) = load {
                    write!(f, " at {l}%")?;
                }
                if let Some(cap) = freq_cap_khz {
                    write!(f, " capped at {} MHz", cap / 1000)?;
                }
                write!(f, " for {}s", duration.as_secs_f64())
            }
        }
    }
}

/// What the plan is built from.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub stressors: Vec<Stressor>,
    /// Instance counts; empty: 1, half the CPUs and all of them.
    pub instances: Vec<u32>,
    /// `--cpu-load` levels for the cpu stressor, percent.
    pub loads: Vec<u8>,
    pub run: Duration,
    pub idle: Duration,
    /// Frequency caps (kHz) to repeat the cpu runs under; empty where cpufreq is not writable.
    pub freq_caps_khz: Vec<u64>,
}

/// The instance counts used when none are given: 1, half the CPUs and all of them.
pub fn default_instances(cpus: u32) -> Vec<u32> {
    let mut v = vec![1, (cpus / 2).max(1), cpus.max(1)];
    v.dedup();
    v
}

/// Builds the plan: an idle phase first (the baseline), then each stress run followed by an
/// idle phase so that the next run starts from a cool, idle node.
pub fn build(opts: &PlanOptions, cpus: u32) -> Vec<Phase> {
    let instances = if opts.instances.is_empty() {
        default_instances(cpus)
    } else {
        opts.instances.clone()
    };
    let idle = Phase::Idle {
        duration: opts.idle,
    };
    let mut plan = vec![idle.clone()];
    let caps: Vec<Option<u64>> = std::iter::once(None)
        .chain(opts.freq_caps_khz.iter().copied().map(Some))
        .collect();
    for &stressor in &opts.stressors {
        let loads: Vec<Option<u8>> = if stressor == Stressor::Cpu && !opts.loads.is_empty() {
            opts.loads.iter().copied().map(Some).collect()
        } else {
            vec![None]
        };
        // Frequency caps change how CPU work turns into power; the cpu stressor shows it.
        let stressor_caps: &[Option<u64>] = if stressor == Stressor::Cpu {
            &caps
        } else {
            &caps[..1]
        };
        for &freq_cap_khz in stressor_caps {
            for &n in &instances {
                for &load in &loads {
                    plan.push(Phase::Stress {
                        stressor,
                        instances: n,
                        load,
                        freq_cap_khz,
                        duration: opts.run,
                    });
                    plan.push(idle.clone());
                }
            }
        }
    }
    plan
}

pub fn total(plan: &[Phase]) -> Duration {
    plan.iter().map(Phase::duration).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> PlanOptions {
        PlanOptions {
            stressors: vec![Stressor::Cpu, Stressor::Vm],
            instances: vec![],
            loads: vec![50, 100],
            run: Duration::from_secs(30),
            idle: Duration::from_secs(10),
            freq_caps_khz: vec![],
        }
    }

    #[test]
    fn plan_covers_stressors_instances_and_loads_with_idle_between() {
        let plan = build(&opts(), 8);
        // cpu: 3 instance counts × 2 loads; vm: 3 instance counts; each followed by idle.
        assert_eq!(plan.len(), 1 + 2 * (6 + 3));
        assert!(matches!(plan[0], Phase::Idle { .. }));
        for pair in plan[1..].chunks(2) {
            assert!(matches!(pair[0], Phase::Stress { .. }), "{:?}", pair[0]);
            assert!(matches!(pair[1], Phase::Idle { .. }));
        }
        assert_eq!(total(&plan), Duration::from_secs(10 + 9 * 40));
        assert_eq!(
            plan[1].stress_ng_args().unwrap(),
            [
                "--cpu",
                "1",
                "--timeout",
                "30s",
                "--quiet",
                "--cpu-load",
                "50"
            ]
        );
        let vm = plan.iter().rev().nth(1).unwrap();
        assert_eq!(
            vm.stress_ng_args().unwrap(),
            [
                "--vm",
                "8",
                "--timeout",
                "30s",
                "--quiet",
                "--vm-bytes",
                "256M"
            ]
        );
        assert_eq!(plan[0].stress_ng_args(), None);
    }

    #[test]
    fn frequency_caps_repeat_the_cpu_runs() {
        let mut o = opts();
        o.stressors = vec![Stressor::Cpu, Stressor::Io];
        o.instances = vec![2];
        o.freq_caps_khz = vec![1_500_000];
        let plan = build(&o, 8);
        let capped = plan.iter().filter(|p| p.freq_cap_khz().is_some()).count();
        assert_eq!(
            capped, 2,
            "both cpu loads once more under the cap, io never"
        );
        assert_eq!(plan.len(), 1 + 2 * (2 + 2 + 1));
        assert!(plan
            .iter()
            .any(|p| p.to_string() == "cpu ×2 at 100% capped at 1500 MHz for 30s"));
    }

    #[test]
    fn default_instances_dedup_on_small_machines() {
        assert_eq!(default_instances(1), [1]);
        assert_eq!(default_instances(2), [1, 2]);
        assert_eq!(default_instances(16), [1, 8, 16]);
    }
}
