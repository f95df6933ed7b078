//! The estimation meter itself: predictions of a loaded model from the tick's node features,
//! reloaded when its file changes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use kepler_core::{
    ExpectedError, Feature, MeterInput, PowerMeter, Provenance, ReadError, Unavailable, Watts,
    ZoneReading,
};
use kepler_models::{FeatureLookup, Predictor};
use tracing::{info, warn};

/// Whether predictions include idle power.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OutputType {
    /// Absolute power, idle included (bare metal).
    Abs,
    /// Dynamic power only: the prediction minus the prediction at zero usage (inside a VM,
    /// where the host's idle power is not the guest's to report).
    Dyn,
}

impl OutputType {
    pub fn as_str(self) -> &'static str {
        match self {
            OutputType::Abs => "AbsPower",
            OutputType::Dyn => "DynPower",
        }
    }
}

/// Where the model came from, so a changed file is picked up without a restart.
#[derive(Clone, Debug)]
pub struct ModelFile {
    pub path: PathBuf,
    pub trainer_hint: Option<String>,
    /// How often to look at the file's modification time.
    pub check_every: Duration,
    /// A pointer file naming the model file to use instead of `path` when it changes (a
    /// model server that switched models); see `fetch::CURRENT_POINTER`.
    pub follow: Option<PathBuf>,
}

pub struct ModelMeter {
    predictor: Box<dyn Predictor>,
    model_name: String,
    output: OutputType,
    /// Features the usage source can provide.
    available: Vec<Feature>,
    zones: Vec<(String, Arc<str>, Arc<str>)>,
    /// The prediction at zero usage, subtracted for dynamic power; fixed per model.
    idle: Vec<(String, f64)>,
    file: Option<(ModelFile, Option<SystemTime>, std::time::Instant)>,
    /// How the model was chosen, for `kepler probe`.
    detail: Option<String>,
    /// Why this model, in one line, for `kepler_node_cpu_zone_info`.
    reason: Option<String>,
    /// The model's stated error per zone, exported beside the estimate.
    expected_error: Vec<ExpectedError>,
}

impl std::fmt::Debug for ModelMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelMeter")
            .field("model", &self.model_name)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

/// Zone names of model components: RAPL-like components keep their names; anything else
/// (`platform`) too. The path names the model so series from different models differ.
fn zones_of(predictor: &dyn Predictor, model_name: &str) -> Vec<(String, Arc<str>, Arc<str>)> {
    predictor
        .components()
        .into_iter()
        .map(|c| {
            let zone: Arc<str> = Arc::from(c.as_str());
            let path: Arc<str> = Arc::from(format!("model:{model_name}:{c}"));
            (c, zone, path)
        })
        .collect()
}

fn predict(
    predictor: &dyn Predictor,
    model_name: &str,
    input: &dyn FeatureLookup,
) -> Result<Vec<(String, f64)>, String> {
    predictor
        .predict(input)
        .map_err(|e| format!("model {model_name}: {e}"))
}

/// The model's prediction with every feature it needs at zero: its idle power.
fn idle_power(predictor: &dyn Predictor, model_name: &str) -> Result<Vec<(String, f64)>, String> {
    let zeros: Vec<(Feature, f64)> = predictor.features().into_iter().map(|f| (f, 0.0)).collect();
    predict(predictor, model_name, &zeros)
}

fn names(features: &[Feature]) -> String {
    features
        .iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_features(
    predictor: &dyn Predictor,
    available: &[Feature],
    model_name: &str,
) -> Result<(), Unavailable> {
    let missing: Vec<Feature> = predictor
        .features()
        .into_iter()
        .filter(|f| !available.contains(f))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Unavailable::new(format!(
            "model {model_name} needs features {} that the usage source does not provide (it has {})",
            names(&missing),
            names(available)
        )))
    }
}

impl ModelMeter {
    /// `available` lists the features the usage source provides.
    pub fn new(
        predictor: Box<dyn Predictor>,
        model_name: impl Into<String>,
        output: OutputType,
        available: Vec<Feature>,
    ) -> Result<Self, Unavailable> {
        let model_name = model_name.into();
        check_features(predictor.as_ref(), &available, &model_name)?;
        if predictor.components().is_empty() {
            return Err(Unavailable::new(format!(
                "model {model_name} has no components"
            )));
        }
        let mut meter = ModelMeter {
            zones: zones_of(predictor.as_ref(), &model_name),
            predictor,
            model_name,
            output,
            available,
            idle: Vec::new(),
            file: None,
            detail: None,
            reason: None,
            expected_error: Vec::new(),
        };
        meter.idle =
            idle_power(meter.predictor.as_ref(), &meter.model_name).map_err(Unavailable::new)?;
        Ok(meter)
    }

    /// Reloads the model from `file` whenever its modification time changes.
    pub fn watch(mut self, file: ModelFile) -> Self {
        let modified = std::fs::metadata(&file.path)
            .and_then(|m| m.modified())
            .ok();
        self.file = Some((file, modified, std::time::Instant::now()));
        self
    }

    /// Says how the model was chosen (shown by `kepler probe`).
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Says in one line why this model estimates (exported with the zones).
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// States the model's expected error per component (from its validation on data it was
    /// not trained on); components the model does not output are ignored. A model reloaded
    /// from a changed file states none: its validation is not known.
    pub fn with_expected_error(mut self, errors: Vec<ExpectedError>) -> Self {
        self.expected_error = errors
            .into_iter()
            .filter(|e| self.zones.iter().any(|(_, zone, _)| *zone == e.zone))
            .collect();
        self
    }

    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    pub fn output(&self) -> OutputType {
        self.output
    }

    /// Predicted watts per component for these features (missing ones are absent, so the
    /// model reports them by name).
    fn predict_at(&self, features: &dyn FeatureLookup) -> Result<HashMap<String, f64>, String> {
        let mut watts: HashMap<String, f64> =
            predict(self.predictor.as_ref(), &self.model_name, features)?
                .into_iter()
                .collect();
        if self.output == OutputType::Dyn {
            for (component, idle) in &self.idle {
                if let Some(w) = watts.get_mut(component) {
                    *w = (*w - idle).max(0.0);
                }
            }
        }
        Ok(watts)
    }

    fn reload_if_changed(&mut self) {
        let Some((file, seen, checked)) = &mut self.file else {
            return;
        };
        if checked.elapsed() < file.check_every {
            return;
        }
        *checked = std::time::Instant::now();
        if let Some(next) = file
            .follow
            .as_deref()
            .and_then(super::fetch::pointed_model)
            .filter(|next| *next != file.path && next.exists())
        {
            info!(from = %file.path.display(), to = %next.display(), "estimation model switched");
            file.path = next;
            // Forces the load below: the new file's time says nothing about the old one's.
            *seen = None;
        }
        let modified = std::fs::metadata(&file.path)
            .and_then(|m| m.modified())
            .ok();
        if modified == *seen {
            return;
        }
        *seen = modified;
        let loaded = kepler_models::load_model(&file.path, file.trainer_hint.as_deref())
            .map_err(|e| e.to_string())
            .and_then(|p| {
                check_features(p.as_ref(), &self.available, &self.model_name)
                    .map(|()| p)
                    .map_err(|e| e.to_string())
            });
        match loaded {
            Ok(predictor) => match idle_power(predictor.as_ref(), &self.model_name) {
                Ok(idle) => {
                    info!(path = %file.path.display(), "estimation model reloaded");
                    self.zones = zones_of(predictor.as_ref(), &self.model_name);
                    self.expected_error.clear();
                    self.idle = idle;
                    self.predictor = predictor;
                }
                Err(e) => {
                    warn!(path = %file.path.display(), error = %e, "reloaded model cannot predict; keeping the previous model")
                }
            },
            Err(e) => {
                warn!(path = %file.path.display(), error = %e, "model file changed but cannot be used; keeping the previous model")
            }
        }
    }
}

impl PowerMeter for ModelMeter {
    fn name(&self) -> &str {
        "model"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Estimated
    }

    fn estimation_model(&self) -> Option<&str> {
        Some(&self.model_name)
    }

    fn includes_idle(&self) -> bool {
        self.output == OutputType::Abs
    }

    fn expected_error(&self) -> Vec<ExpectedError> {
        self.expected_error.clone()
    }

    fn estimation_reason(&self) -> Option<String> {
        self.reason.clone()
    }

    fn detail(&self) -> Option<String> {
        let output = match self.output {
            OutputType::Abs => "AbsPower (idle included)",
            OutputType::Dyn => "DynPower (idle left out)",
        };
        Some(match &self.detail {
            Some(detail) => format!("{detail}; output {output}"),
            None => format!("output {output}"),
        })
    }

    fn zones(&self) -> Vec<String> {
        self.zones.iter().map(|(c, _, _)| c.clone()).collect()
    }

    fn needs_features(&self) -> bool {
        true
    }

    fn features_used(&self) -> Vec<Feature> {
        // A watched file can bring a model with other features; it must find them collected.
        if self.file.is_some() {
            self.available.clone()
        } else {
            self.predictor.features()
        }
    }

    fn read(
        &mut self,
        input: &MeterInput<'_>,
        out: &mut Vec<ZoneReading>,
    ) -> Result<(), ReadError> {
        self.reload_if_changed();
        let watts = match input.features {
            Some(features) => self.predict_at(features).map_err(|e| {
                ReadError::Other(format!(
                    "estimation with model {} failed: {e}",
                    self.model_name
                ))
            })?,
            // No interval yet (the first tick): the power at zero usage, which is what the
            // counters of a real meter would start from.
            None => match self.output {
                OutputType::Abs => self.idle.iter().cloned().collect(),
                OutputType::Dyn => self.idle.iter().map(|(c, _)| (c.clone(), 0.0)).collect(),
            },
        };
        for (component, zone, path) in &self.zones {
            let w = watts.get(component).copied().unwrap_or(0.0);
            out.push(ZoneReading::power(zone.clone(), path.clone(), Watts(w)));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kepler_core::features::FeatureRates;
    use kepler_core::{zone_energies, EnergySnapshot, MicroJoules, ZoneSample};

    /// package = 10 + 0.01·x, dram = 2 + 0.001·x, with x = bpf_cpu_time_ms.
    const LINEAR: &str = r#"{"package": {"All_Weights": {"Bias_Weight": 10.0, "Categorical_Variables": {},
        "Numerical_Variables": {"bpf_cpu_time_ms": {"scale": 1.0, "weight": 0.01}}}},
      "dram": {"All_Weights": {"Bias_Weight": 2.0, "Categorical_Variables": {},
        "Numerical_Variables": {"bpf_cpu_time_ms": {"scale": 1.0, "weight": 0.001}}}}}"#;

    fn model() -> Box<dyn Predictor> {
        kepler_models::load_model_bytes(LINEAR.as_bytes(), Some("SGDRegressorTrainer_0.json"), None)
            .unwrap()
    }

    /// Node features of an interval with `busy_ms_per_s` busy CPU milliseconds per second.
    fn busy(busy_ms_per_s: f64) -> FeatureRates {
        FeatureRates {
            bpf_cpu_time_ms: busy_ms_per_s,
            ..FeatureRates::default()
        }
    }

    fn read(meter: &mut ModelMeter, features: Option<&FeatureRates>) -> Vec<ZoneReading> {
        let mut out = Vec::new();
        meter.read(&MeterInput { features }, &mut out).unwrap();
        out
    }

    #[test]
    fn predicts_from_busy_cpu_time_and_integrates_to_energy() {
        let mut meter =
            ModelMeter::new(model(), "m", OutputType::Abs, vec![Feature::BpfCpuTimeMs]).unwrap();
        assert_eq!(meter.provenance(), Provenance::Estimated);
        assert_eq!(meter.zones(), vec!["package", "dram"]);
        let first = EnergySnapshot {
            at: Duration::from_secs(0),
            readings: read(&mut meter, None),
        };
        // 2 s with 3 busy CPU-seconds: x = 1500 ms/s → package 25 W, dram 3.5 W.
        let second = EnergySnapshot {
            at: Duration::from_secs(2),
            readings: read(&mut meter, Some(&busy(1500.0))),
        };
        let (zones, issues) = zone_energies(&first, &second, &Arc::new(meter.meta()));
        assert!(issues.is_empty());
        assert_eq!(zones[0].energy, MicroJoules(50_000_000));
        assert_eq!(zones[1].energy, MicroJoules(7_000_000));
    }

    #[test]
    fn dynamic_output_leaves_idle_out() {
        let mut meter =
            ModelMeter::new(model(), "m", OutputType::Dyn, vec![Feature::BpfCpuTimeMs]).unwrap();
        assert_eq!(
            read(&mut meter, None)[0].sample,
            ZoneSample::Power(Watts(0.0))
        );
        let readings = read(&mut meter, Some(&busy(1500.0)));
        assert_eq!(readings[0].sample, ZoneSample::Power(Watts(15.0)));
        assert!(
            matches!(readings[1].sample, ZoneSample::Power(Watts(w)) if (w - 1.5).abs() < 1e-12)
        );
    }

    #[test]
    fn a_model_needing_unavailable_features_is_refused_by_name() {
        let counters = LINEAR.replace("bpf_cpu_time_ms", "cpu_instructions");
        let p = kepler_models::load_model_bytes(
            counters.as_bytes(),
            Some("SGDRegressorTrainer_0.json"),
            None,
        )
        .unwrap();
        let err = ModelMeter::new(p, "m", OutputType::Abs, vec![Feature::BpfCpuTimeMs])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cpu_instructions"), "{err}");
    }

    /// A fixed model uses only its own features; a watched one may be replaced by a model
    /// needing any feature the source offered, so it keeps them all.
    #[test]
    fn features_used_are_the_model_s_unless_it_can_change() {
        let offered = vec![
            Feature::BpfCpuTimeMs,
            Feature::BpfNetRxIrq,
            Feature::BpfPageCacheHit,
        ];
        let fixed = ModelMeter::new(model(), "m", OutputType::Abs, offered.clone()).unwrap();
        assert_eq!(fixed.features_used(), vec![Feature::BpfCpuTimeMs]);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("SGDRegressorTrainer_0.json");
        std::fs::write(&path, LINEAR).unwrap();
        let watched = ModelMeter::new(model(), "m", OutputType::Abs, offered.clone())
            .unwrap()
            .watch(ModelFile {
                path,
                trainer_hint: None,
                check_every: Duration::ZERO,
                follow: None,
            });
        assert_eq!(watched.features_used(), offered);
    }

    #[test]
    fn a_changed_model_file_is_reloaded_and_a_broken_one_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("SGDRegressorTrainer_0.json");
        std::fs::write(&path, LINEAR).unwrap();
        let predictor = kepler_models::load_model(&path, None).unwrap();
        let mut meter =
            ModelMeter::new(predictor, "m", OutputType::Abs, vec![Feature::BpfCpuTimeMs])
                .unwrap()
                .watch(ModelFile {
                    path: path.clone(),
                    trainer_hint: None,
                    check_every: Duration::ZERO,
                    follow: None,
                });
        // Same size, later modification time: bias 10 → 20.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, LINEAR.replace("10.0", "20.0")).unwrap();
        let idle = busy(0.0);
        assert_eq!(
            read(&mut meter, Some(&idle))[0].sample,
            ZoneSample::Power(Watts(20.0))
        );
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&path, "{not json").unwrap();
        assert_eq!(
            read(&mut meter, Some(&idle))[0].sample,
            ZoneSample::Power(Watts(20.0))
        );
    }

    /// A model server that starts choosing another model moves the pointer; the meter then
    /// loads the new file (its trainer from its own name) without a restart.
    #[test]
    fn the_meter_follows_the_pointer_to_another_model_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("SGDRegressorTrainer_0.json");
        std::fs::write(&first, LINEAR).unwrap();
        let pointer = dir.path().join(super::super::fetch::CURRENT_POINTER);
        std::fs::write(&pointer, "SGDRegressorTrainer_0.json").unwrap();
        let predictor = kepler_models::load_model(&first, None).unwrap();
        let mut meter =
            ModelMeter::new(predictor, "m", OutputType::Abs, vec![Feature::BpfCpuTimeMs])
                .unwrap()
                .watch(ModelFile {
                    path: first.clone(),
                    trainer_hint: None,
                    check_every: Duration::ZERO,
                    follow: Some(pointer.clone()),
                });
        let idle = busy(0.0);
        assert_eq!(
            read(&mut meter, Some(&idle))[0].sample,
            ZoneSample::Power(Watts(10.0))
        );
        let second = dir.path().join("SGDRegressorTrainer_1.json");
        std::fs::write(&second, LINEAR.replace("10.0", "30.0")).unwrap();
        std::fs::write(&pointer, "SGDRegressorTrainer_1.json").unwrap();
        assert_eq!(
            read(&mut meter, Some(&idle))[0].sample,
            ZoneSample::Power(Watts(30.0))
        );
        // A pointer to a file that is not there leaves the model in use.
        std::fs::write(&pointer, "SGDRegressorTrainer_9.json").unwrap();
        assert_eq!(
            read(&mut meter, Some(&idle))[0].sample,
            ZoneSample::Power(Watts(30.0))
        );
    }
}
