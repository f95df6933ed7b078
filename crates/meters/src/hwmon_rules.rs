//! `experimental.hwmon.chipRules`: how a chip without power or energy sensors pairs its
//! voltage (`inN`) and current (`currN`) channels, as upstream Kepler v0.11 reads them.
//!
//! hwmon numbers each sensor type on its own, so whether `in1` belongs with `curr1` depends on
//! the driver. A rule names the chip (its `name` file, case and surrounding spaces ignored) and
//! either pairs same-numbered channels (`useSameIndex`, minus `skipVoltages`/`skipCurrents`)
//! or lists the pairs (`pairings`, voltage channel → current channel). A chip no rule names,
//! or a rule that says neither, keeps same-number pairing.

use std::collections::BTreeMap;

use serde::Deserialize;

/// One entry of `experimental.hwmon.chipRules`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChipRule {
    /// The chip driver's name, from the hwmon `name` file.
    pub name: String,
    /// Voltage channel → current channel; ignored when `use_same_index` is set.
    #[serde(default)]
    pub pairings: BTreeMap<u32, u32>,
    /// Voltage channels that measure no rail (shunt voltages, auxiliary inputs).
    #[serde(default)]
    pub skip_voltages: Vec<u32>,
    /// Current channels with no voltage of their own (per-phase, current-only).
    #[serde(default)]
    pub skip_currents: Vec<u32>,
    /// `inN` pairs with `currN`.
    #[serde(default)]
    pub use_same_index: bool,
}

impl ChipRule {
    /// Why this rule cannot be applied, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.name.trim().is_empty() {
            return Some("a rule needs the chip's `name`".into());
        }
        None
    }
}

/// How a chip's voltage and current channels are paired.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pairing<'a> {
    SameIndex {
        skip_volt: &'a [u32],
        skip_curr: &'a [u32],
    },
    Explicit(&'a BTreeMap<u32, u32>),
}

impl<'a> Pairing<'a> {
    /// The first rule naming `chip` decides; none keeps same-number pairing with no skips.
    pub(crate) fn for_chip(chip: &str, rules: &'a [ChipRule]) -> Self {
        let chip = chip.trim().to_lowercase();
        match rules.iter().find(|r| r.name.trim().to_lowercase() == chip) {
            Some(r) if r.use_same_index => Pairing::SameIndex {
                skip_volt: &r.skip_voltages,
                skip_curr: &r.skip_currents,
            },
            Some(r) if !r.pairings.is_empty() => Pairing::Explicit(&r.pairings),
            _ => Pairing::SameIndex {
                skip_volt: &[],
                skip_curr: &[],
            },
        }
    }

    /// (voltage channel, current channel) pairs to measure among the channels that have an
    /// input file. A rule that pairs nothing present falls back to same-number pairing, as
    /// upstream does.
    pub(crate) fn pairs(&self, volts: &[u32], currs: &[u32]) -> Vec<(u32, u32)> {
        let same = |skip_volt: &[u32], skip_curr: &[u32]| -> Vec<(u32, u32)> {
            volts
                .iter()
                .filter(|n| currs.contains(n) && !skip_volt.contains(n) && !skip_curr.contains(n))
                .map(|&n| (n, n))
                .collect()
        };
        let pairs = match self {
            Pairing::SameIndex {
                skip_volt,
                skip_curr,
            } => same(skip_volt, skip_curr),
            Pairing::Explicit(map) => map
                .iter()
                .filter(|(v, c)| volts.contains(v) && currs.contains(c))
                .map(|(&v, &c)| (v, c))
                .collect(),
        };
        if pairs.is_empty() {
            same(&[], &[])
        } else {
            pairs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(yaml: &str) -> ChipRule {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn rules_pair_channels() {
        let rules = [
            rule("{name: ' INA3221 ', useSameIndex: true, skipVoltages: [4], skipCurrents: [2]}"),
            rule("{name: max20730, pairings: {2: 1}}"),
            rule("{name: nothing}"),
        ];
        let same = Pairing::for_chip("ina3221", &rules);
        assert_eq!(same.pairs(&[1, 2, 3, 4], &[1, 2, 3, 4]), [(1, 1), (3, 3)]);
        let explicit = Pairing::for_chip("max20730", &rules);
        assert_eq!(explicit.pairs(&[1, 2], &[1]), [(2, 1)]);
        // A pairing whose channels are absent falls back to same-number pairing.
        assert_eq!(explicit.pairs(&[1, 3], &[1]), [(1, 1)]);
        for chip in ["nothing", "unknown"] {
            assert_eq!(
                Pairing::for_chip(chip, &rules).pairs(&[0, 1, 2], &[1, 2]),
                [(1, 1), (2, 2)]
            );
        }
    }
}
