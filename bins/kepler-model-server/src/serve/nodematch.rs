//! How close a model's node type is to the requesting machine.
//!
//! Processors are compared by [`kepler_models::builtin::cpu_match_key`], the key the built-in
//! model selection uses: brand tokens and separators dropped, then compared for equality,
//! never as substrings (an `8259` is not an `8259CL`, an `E5-2660` not an `E5-2660 v2`;
//! upstream matched substrings, DESIGN §7). A name without a model number matches nothing.

use std::cmp::Ordering;

use kepler_models::builtin::{cpu_match_key, MachineSpec};
use serde::Serialize;

/// Memory sizes within this factor are the same machine: the agent reports `MemTotal`,
/// a little below the installed memory the node-type index states.
const SAME_MEMORY: f64 = 1.05;

/// How a node type matches the machine spec, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchClass {
    /// Same CPU model, logical CPUs and sockets, memory within 5 %.
    Exact,
    /// Same CPU model, another size.
    SameCpu,
    /// Another CPU model.
    OtherCpu,
    /// The model's node type is not described by its pipeline (or it has none).
    Unknown,
}

impl MatchClass {
    pub fn as_str(self) -> &'static str {
        match self {
            MatchClass::Exact => "exact",
            MatchClass::SameCpu => "same-cpu",
            MatchClass::OtherCpu => "other-cpu",
            MatchClass::Unknown => "unknown",
        }
    }
}

/// A node type's match: the class, then how far its size is (log ratios of logical CPUs,
/// sockets, memory, frequency, compared in that order).
#[derive(Debug, Clone, Copy)]
pub struct NodeMatch {
    pub class: MatchClass,
    distance: [f64; 4],
}

impl NodeMatch {
    pub const UNKNOWN: NodeMatch = NodeMatch {
        class: MatchClass::Unknown,
        distance: [0.0; 4],
    };

    pub fn of(host: &MachineSpec, node: &MachineSpec) -> NodeMatch {
        let host_key = cpu_match_key(&host.processor);
        let same_cpu = host_key.is_some() && host_key == cpu_match_key(&node.processor);
        let log_ratio = |a: f64, b: f64| {
            if a > 0.0 && b > 0.0 {
                (a / b).ln().abs()
            } else {
                0.0
            }
        };
        let cores = log_ratio(f64::from(host.logical_cores), f64::from(node.logical_cores));
        let chips = log_ratio(f64::from(host.chips), f64::from(node.chips));
        let memory = log_ratio(host.memory_gb, node.memory_gb);
        let frequency = log_ratio(
            host.frequency_mhz.unwrap_or(0.0),
            node.frequency_mhz.unwrap_or(0.0),
        );
        let exact = same_cpu && cores == 0.0 && chips == 0.0 && memory <= SAME_MEMORY.ln();
        let class = if exact {
            MatchClass::Exact
        } else if same_cpu {
            MatchClass::SameCpu
        } else {
            MatchClass::OtherCpu
        };
        NodeMatch {
            class,
            // Within the exact class memory differences are noise: only frequency ranks.
            distance: if exact {
                [0.0, 0.0, 0.0, frequency]
            } else {
                [cores, chips, memory, frequency]
            },
        }
    }

    /// Best first.
    pub fn cmp(&self, other: &NodeMatch) -> Ordering {
        self.class.cmp(&other.class).then_with(|| {
            self.distance
                .iter()
                .zip(other.distance.iter())
                .map(|(a, b)| a.total_cmp(b))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(processor: &str, cores: u32, chips: u32, memory: f64) -> MachineSpec {
        MachineSpec {
            processor: processor.into(),
            logical_cores: cores,
            physical_cores: None,
            chips,
            memory_gb: memory,
            frequency_mhz: None,
        }
    }

    #[test]
    fn classes() {
        let m5 = spec("intel_xeon_platinum_8259cl", 96, 2, 377.0);
        let host = spec(
            "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
            96,
            2,
            370.0,
        );
        assert_eq!(NodeMatch::of(&host, &m5).class, MatchClass::Exact);
        // A prefix of the name is another CPU.
        let prefix = spec("intel_xeon_platinum_8259", 96, 2, 377.0);
        assert_eq!(NodeMatch::of(&prefix, &m5).class, MatchClass::OtherCpu);
        let half = spec("intel_xeon_platinum_8259cl", 48, 1, 188.0);
        assert_eq!(NodeMatch::of(&half, &m5).class, MatchClass::SameCpu);
        // Unknown sockets and memory do not prevent an exact match.
        let unknown = spec("xeon platinum 8259CL", 96, 0, 0.0);
        assert_eq!(NodeMatch::of(&unknown, &m5).class, MatchClass::Exact);
        // No model number: nothing matches.
        let generic = spec("intel_xeon", 96, 2, 377.0);
        let generic_node = spec("intel_xeon", 96, 2, 377.0);
        assert_eq!(
            NodeMatch::of(&generic, &generic_node).class,
            MatchClass::OtherCpu
        );
    }

    #[test]
    fn nearer_sizes_rank_first() {
        let host = spec("intel_xeon_platinum_8259cl", 96, 2, 500.0);
        let m5 = spec("intel_xeon_platinum_8259cl", 96, 2, 377.0);
        let r5 = spec("intel_xeon_platinum_8259cl", 96, 2, 755.0);
        let (a, b) = (NodeMatch::of(&host, &m5), NodeMatch::of(&host, &r5));
        assert_eq!(a.class, MatchClass::SameCpu);
        assert_eq!(a.cmp(&b), Ordering::Less);
        assert_eq!(NodeMatch::UNKNOWN.cmp(&b), Ordering::Greater);
    }
}
