//! Metric levels: which groups of series are exported (upstream's `--metrics` /
//! `exporter.prometheus.metricsLevel`).

use std::fmt;
use std::str::FromStr;

/// One group of series. Node-level families describe the whole node; the others one series per
/// workload, which is where the cardinality is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    Node,
    Process,
    Container,
    Vm,
    Pod,
}

impl Level {
    /// Every level, in the order upstream lists them.
    pub const ALL: [Level; 5] = [
        Level::Node,
        Level::Process,
        Level::Container,
        Level::Vm,
        Level::Pod,
    ];

    /// The name used in configuration and on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Level::Node => "node",
            Level::Process => "process",
            Level::Container => "container",
            Level::Vm => "vm",
            Level::Pod => "pod",
        }
    }

    const fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A metrics level that is not one of the known names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown metrics level {value:?} (expected one of node, process, container, vm, pod, all)")]
pub struct LevelError {
    /// The value as given.
    pub value: String,
}

impl FromStr for Level {
    type Err = LevelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        Level::ALL
            .into_iter()
            .find(|l| l.as_str().eq_ignore_ascii_case(trimmed))
            .ok_or_else(|| LevelError {
                value: s.to_string(),
            })
    }
}

/// A set of [`Level`]s. The default is every level, as upstream.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct MetricsLevel(u8);

impl MetricsLevel {
    /// No workload or node families: only the metrics that are always exported (build and CPU
    /// info, agent self-metrics).
    pub const NONE: MetricsLevel = MetricsLevel(0);
    pub const ALL: MetricsLevel = MetricsLevel(
        Level::Node.bit()
            | Level::Process.bit()
            | Level::Container.bit()
            | Level::Vm.bit()
            | Level::Pod.bit(),
    );

    pub const fn contains(self, level: Level) -> bool {
        self.0 & level.bit() != 0
    }

    pub const fn with(self, level: Level) -> MetricsLevel {
        MetricsLevel(self.0 | level.bit())
    }

    pub fn insert(&mut self, level: Level) {
        self.0 |= level.bit();
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The levels in the set, in [`Level::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Level> {
        Level::ALL.into_iter().filter(move |l| self.contains(*l))
    }

    /// Parses a list as given in the config file or by repeated `--metrics` flags. Each item may
    /// also be a comma-separated list; `all` stands for every level; case and surrounding spaces
    /// are ignored. An empty list is the empty set (only always-on metrics).
    pub fn parse<I, S>(values: I) -> Result<MetricsLevel, LevelError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = MetricsLevel::NONE;
        for value in values {
            for item in value.as_ref().split(',') {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                if item.eq_ignore_ascii_case("all") {
                    set = MetricsLevel::ALL;
                } else {
                    set.insert(item.parse()?);
                }
            }
        }
        Ok(set)
    }
}

impl Default for MetricsLevel {
    fn default() -> Self {
        MetricsLevel::ALL
    }
}

impl FromStr for MetricsLevel {
    type Err = LevelError;

    /// A comma-separated list, e.g. `node,pod`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MetricsLevel::parse([s])
    }
}

/// `exporter.prometheus.metricsLevel`: a list (`[node, pod]`) or a single string (`all`,
/// `node,pod`), read as [`MetricsLevel::parse`] reads flags. An empty list or string means every
/// level, as upstream's `ParseLevel` does: a file that leaves the list empty must not silently
/// drop every power series.
impl<'de> serde::Deserialize<'de> for MetricsLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(LevelsVisitor)
    }
}

struct LevelsVisitor;

impl<'de> serde::de::Visitor<'de> for LevelsVisitor {
    type Value = MetricsLevel;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of metrics levels, or one string of comma-separated levels")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MetricsLevel, E> {
        let set: MetricsLevel = v.parse().map_err(E::custom)?;
        Ok(if set.is_empty() {
            MetricsLevel::ALL
        } else {
            set
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<MetricsLevel, A::Error> {
        let mut set = MetricsLevel::NONE;
        while let Some(item) = seq.next_element::<String>()? {
            for level in MetricsLevel::parse([item])
                .map_err(serde::de::Error::custom)?
                .iter()
            {
                set.insert(level);
            }
        }
        Ok(if set.is_empty() {
            MetricsLevel::ALL
        } else {
            set
        })
    }
}

impl FromIterator<Level> for MetricsLevel {
    fn from_iter<T: IntoIterator<Item = Level>>(iter: T) -> Self {
        let mut set = MetricsLevel::NONE;
        for level in iter {
            set.insert(level);
        }
        set
    }
}

impl fmt::Display for MetricsLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for level in self.iter() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            f.write_str(level.as_str())?;
        }
        Ok(())
    }
}

impl fmt::Debug for MetricsLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MetricsLevel({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_flags_and_all() {
        let set = MetricsLevel::parse(["node", " Pod "]).unwrap();
        assert!(set.contains(Level::Node) && set.contains(Level::Pod));
        assert!(!set.contains(Level::Process));
        assert_eq!(set.to_string(), "node,pod");
        assert_eq!(
            "process,vm".parse::<MetricsLevel>().unwrap(),
            MetricsLevel::NONE.with(Level::Process).with(Level::Vm)
        );
        assert_eq!(MetricsLevel::parse(["all"]).unwrap(), MetricsLevel::ALL);
        assert_eq!(MetricsLevel::default(), MetricsLevel::ALL);
        assert!(MetricsLevel::parse(Vec::<String>::new())
            .unwrap()
            .is_empty());
    }

    #[test]
    fn deserializes_from_a_list_or_a_string() {
        let all = MetricsLevel::ALL;
        let node_pod = MetricsLevel::NONE.with(Level::Node).with(Level::Pod);
        for (yaml, expected) in [
            ("[node, pod]", node_pod),
            ("[NODE, Pod]", node_pod),
            ("[\"node,pod\"]", node_pod),
            ("node,pod", node_pod),
            ("all", all),
            ("ALL", all),
            ("[all]", all),
            ("[node, all]", all),
            ("vm", MetricsLevel::NONE.with(Level::Vm)),
            ("[]", all),
            ("\"\"", all),
        ] {
            let got: MetricsLevel = serde_yaml::from_str(yaml).unwrap();
            assert_eq!(got, expected, "{yaml}");
        }
        for yaml in ["[node, gpu]", "nodes", "[node, [pod]]", "3", "{node: true}"] {
            assert!(
                serde_yaml::from_str::<MetricsLevel>(yaml).is_err(),
                "{yaml} should be rejected"
            );
        }
        let err = serde_yaml::from_str::<MetricsLevel>("[node, gpu]").unwrap_err();
        assert!(err.to_string().contains("\"gpu\""), "{err}");
    }

    #[test]
    fn bad_value_is_named() {
        let err = MetricsLevel::parse(["node", "gpu"]).unwrap_err();
        assert_eq!(err.value, "gpu");
        assert!(err.to_string().contains("\"gpu\""), "{err}");
    }
}
