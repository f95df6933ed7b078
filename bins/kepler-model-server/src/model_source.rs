//! Where a model comes from: a model-DB file, or the built-in defaults chosen by machine spec.
//!
//! Built-in models plug in through [`BuiltinModels`] ([`crate::builtin::Embedded`] in the
//! binary; tests pass recording stand-ins).

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kepler_models::builtin::BuiltinFamily;
use kepler_models::Predictor;

/// The `--model` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A weight JSON or `.zip` archive.
    File(PathBuf),
    /// The built-in default models, chosen by machine spec.
    Builtin,
}

impl std::str::FromStr for ModelSource {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // A file literally named "builtin" can still be given as ./builtin.
        Ok(if s == "builtin" {
            ModelSource::Builtin
        } else {
            ModelSource::File(PathBuf::from(s))
        })
    }
}

/// Chooses a built-in model for a machine. `spec` is the parsed `--spec` file (the model
/// server's machine-spec JSON: processor, cores, chips, memory, frequency), `None` to use
/// the local machine's.
pub trait BuiltinModels {
    fn select(
        &self,
        spec: Option<&serde_json::Value>,
        family: BuiltinFamily,
    ) -> Result<Box<dyn Predictor>>;
}

/// Loads the model `source` names.
pub fn load(
    source: &ModelSource,
    trainer: Option<&str>,
    spec: Option<&Path>,
    family: BuiltinFamily,
    builtin: &dyn BuiltinModels,
) -> Result<Box<dyn Predictor>> {
    match source {
        ModelSource::File(path) => {
            if spec.is_some() {
                tracing::warn!("--spec only applies to --model builtin; ignored");
            }
            kepler_models::load_model(path, trainer)
                .with_context(|| format!("loading model {}", path.display()))
        }
        ModelSource::Builtin => {
            if trainer.is_some() {
                tracing::warn!("--trainer does not apply to --model builtin; ignored");
            }
            let spec = spec.map(read_spec).transpose()?;
            builtin.select(spec.as_ref(), family)
        }
    }
}

/// Largest machine spec read: a real one is a few hundred bytes.
const MAX_SPEC_BYTES: u64 = 1 << 20;

fn read_spec(path: &Path) -> Result<serde_json::Value> {
    let mut text = Vec::new();
    // Bounded read, not a length check: FIFOs, /proc and device files report no true size.
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SPEC_BYTES + 1).read_to_end(&mut text))
        .with_context(|| format!("reading machine spec {}", path.display()))?;
    if text.len() as u64 > MAX_SPEC_BYTES {
        bail!(
            "machine spec {} is larger than {MAX_SPEC_BYTES} bytes",
            path.display()
        );
    }
    let spec: serde_json::Value = serde_json::from_slice(&text)
        .with_context(|| format!("parsing machine spec {}", path.display()))?;
    if !spec.is_object() {
        bail!("machine spec {} must be a JSON object", path.display());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// A resolver that records the spec it was given and answers with a model-DB file,
    /// as the built-in models will.
    struct Recording(RefCell<Option<serde_json::Value>>);

    impl BuiltinModels for Recording {
        fn select(
            &self,
            spec: Option<&serde_json::Value>,
            _family: BuiltinFamily,
        ) -> Result<Box<dyn Predictor>> {
            *self.0.borrow_mut() = spec.cloned();
            let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
                "../../data/kepler-model-db/models/v0.7/specpower-0.7.11/acpi/AbsPower/BPFOnly/SGDRegressorTrainer_0.json",
            );
            Ok(kepler_models::load_model(&path, None)?)
        }
    }

    #[test]
    fn parses_model_argument() {
        assert_eq!(
            "builtin".parse::<ModelSource>().ok(),
            Some(ModelSource::Builtin)
        );
        assert_eq!(
            "./builtin".parse::<ModelSource>().ok(),
            Some(ModelSource::File(PathBuf::from("./builtin")))
        );
    }

    #[cfg(unix)]
    #[test]
    fn endless_spec_files_are_cut_at_the_size_limit() {
        // /dev/zero reports length 0 and never ends: only a bounded read stops.
        let err = read_spec(Path::new("/dev/zero")).expect_err("endless spec");
        assert!(err.to_string().contains("larger than"), "{err:#}");
    }

    #[test]
    fn builtin_resolver_plugs_in_and_gets_the_spec() -> Result<()> {
        let spec = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/kepler-model-server/tests/data/machine/spec.json");
        let resolver = Recording(RefCell::new(None));
        let model = load(
            &ModelSource::Builtin,
            None,
            Some(&spec),
            BuiltinFamily::Platform,
            &resolver,
        )?;
        assert_eq!(model.components(), ["platform"]);
        let seen = resolver.0.borrow().clone().unwrap_or_default();
        assert_eq!(seen["processor"], "intel_xeon_platinum_8259cl");
        assert_eq!(seen["cores"], 96);
        Ok(())
    }
}
