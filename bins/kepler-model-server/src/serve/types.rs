//! Values shared by the index, the selection and the API: output types, file formats and
//! accuracy figures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether a model includes idle power (`AbsPower`, node level) or not (`DynPower`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum OutputType {
    AbsPower,
    DynPower,
}

impl OutputType {
    pub const ALL: [OutputType; 2] = [OutputType::AbsPower, OutputType::DynPower];

    pub fn as_str(self) -> &'static str {
        match self {
            OutputType::AbsPower => "AbsPower",
            OutputType::DynPower => "DynPower",
        }
    }

    /// The directory name of the model-DB layout (`AbsPower`, `DynPower`).
    pub fn from_dir(name: &str) -> Option<OutputType> {
        OutputType::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

/// How a model file is stored: the legacy API's `weight: true` answers with a weight JSON,
/// `weight: false` with an archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    Json,
    Zip,
}

impl FileFormat {
    pub fn from_extension(ext: &str) -> Option<FileFormat> {
        match ext {
            "json" => Some(FileFormat::Json),
            "zip" => Some(FileFormat::Zip),
            _ => None,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            FileFormat::Json => "application/json",
            FileFormat::Zip => "application/zip",
        }
    }
}

/// Errors of one component, as the model DB publishes them. Negative figures in the tables
/// (`-1`: no MAPE for a component that is always 0 W) are taken as unknown.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ComponentAccuracy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mae: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mape: Option<f64>,
}

/// A model's accuracy. `mae` and `mape` are the worst component's: the published tables'
/// overall `mape` is the last component's (an upstream bug, DESIGN §7), which would rank a
/// model by its DRAM error while its package error is three times larger.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Accuracy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mae: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mape: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, ComponentAccuracy>,
}

impl Accuracy {
    /// Builds the accuracy from named figures (`mae`, `mape`, `<component>_mae`,
    /// `<component>_mape`), as in the metadata tables and archive metadata. The worst known
    /// component decides; the overall figures count only when no component has one.
    pub fn from_figures<'a>(figures: impl IntoIterator<Item = (&'a str, f64)>) -> Accuracy {
        let mut overall = ComponentAccuracy::default();
        let mut components: BTreeMap<String, ComponentAccuracy> = BTreeMap::new();
        for (name, value) in figures {
            if !(value.is_finite() && value >= 0.0) {
                continue;
            }
            let (target, metric) = match name.rsplit_once('_') {
                Some((component, metric)) => {
                    (components.entry(component.to_string()).or_default(), metric)
                }
                None => (&mut overall, name),
            };
            match metric {
                "mae" => target.mae = Some(value),
                "mape" => target.mape = Some(value),
                _ => {}
            }
        }
        components.retain(|_, c| c.mae.is_some() || c.mape.is_some());
        let worst = |get: fn(&ComponentAccuracy) -> Option<f64>| {
            components.values().filter_map(get).reduce(f64::max)
        };
        Accuracy {
            mae: worst(|c| c.mae).or(overall.mae),
            mape: worst(|c| c.mape).or(overall.mape),
            components,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_component_decides() {
        // The ec2 SGDRegressorTrainer_0 row: published mape 17.77 is dram's, package's is 50.93.
        let a = Accuracy::from_figures([
            ("mae", 60.78),
            ("mape", 17.77),
            ("package_mae", 60.78),
            ("core_mae", 0.0),
            ("dram_mae", 3.17),
            ("package_mape", 50.93),
            ("core_mape", -1.0),
            ("dram_mape", 17.77),
        ]);
        assert_eq!(a.mae, Some(60.78));
        assert_eq!(a.mape, Some(50.93));
        assert_eq!(a.components["core"].mape, None);
        assert_eq!(a.components["core"].mae, Some(0.0));
        // Without component figures the overall ones stand.
        let b = Accuracy::from_figures([("mae", 4.2), ("mape", -1.0)]);
        assert_eq!((b.mae, b.mape), (Some(4.2), None));
        assert_eq!(Accuracy::from_figures([]), Accuracy::default());
    }
}
