//! The model directory, indexed at start-up and on a rescan.
//!
//! Two shapes are understood, and may be mixed:
//!
//! - a model-DB tree as published: `<pipeline>/<source>/<AbsPower|DynPower>/<FeatureGroup>/
//!   <Trainer>_<nodetype>.{json,zip}`, with `node_type_index.json` and
//!   `<source>_<OutputType>_model_metadata.csv` accuracy tables in each pipeline directory
//!   (the model directory may also be one pipeline directory itself);
//! - plain model files anywhere else: what they are comes from the file (components, archive
//!   metadata) and its name (trainer, node type, `AbsPower`/`DynPower`).
//!
//! Every model file is loaded with [`kepler_models::load_model_bytes`] to prove it loads; one
//! that does not is logged and listed as broken, never served. The bytes that loaded are kept
//! and served, so what a client receives is what was checked, whatever happens to the file
//! later. Symlinks are followed only to files inside the model directory.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kepler_models::{ModelKind, Trainer};

use super::metadata::{self, NodeTypeInfo};
use super::types::{Accuracy, FileFormat, OutputType};

/// Accuracy tables by (pipeline dir, source, output type), each by (feature group, model).
type Tables = HashMap<(String, String, OutputType), HashMap<(String, String), Accuracy>>;

/// Deepest directory nesting walked; the model-DB layout needs five levels.
const MAX_DEPTH: usize = 16;
/// Most model files indexed; far above any published model DB (the SPECpower pipeline has
/// about 3000 models), it bounds start-up time and memory on a wrong `--model-dir` such as /.
const MAX_MODEL_FILES: usize = 100_000;

/// One model file that loaded.
#[derive(Debug)]
pub struct ModelEntry {
    /// Relative to the model directory, `/`-separated: the name the API uses.
    pub path: String,
    /// The file name without extension (`SGDRegressorTrainer_0`).
    pub name: String,
    pub format: FileFormat,
    /// The pipeline directory, relative (`""` when the model directory is the pipeline);
    /// `None` for a plain file.
    pub pipeline_dir: Option<String>,
    pub pipeline: Option<String>,
    pub source: Option<String>,
    pub output_type: Option<OutputType>,
    pub feature_group: Option<String>,
    pub trainer: Option<Trainer>,
    pub node_type: Option<u32>,
    pub kind: ModelKind,
    /// The features the model needs (canonical names): those that can change a prediction.
    /// A request must provide these; a feature listed with weight 0 is not needed.
    pub features: Vec<String>,
    /// Every feature the file lists.
    pub declared_features: Vec<String>,
    pub components: Vec<String>,
    pub accuracy: Accuracy,
    /// The file as loaded: what is served (cheap to clone).
    pub bytes: axum::body::Bytes,
}

/// A file that was not indexed, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Broken {
    pub path: String,
    pub error: String,
}

/// A model-DB pipeline directory.
#[derive(Debug, Default)]
pub struct Pipeline {
    pub name: String,
    pub node_types: BTreeMap<u32, NodeTypeInfo>,
}

#[derive(Debug, Default)]
pub struct ModelIndex {
    /// Sorted by path.
    pub models: Vec<ModelEntry>,
    pub broken: Vec<Broken>,
    /// By pipeline directory (relative, `""` for the model directory itself).
    pub pipelines: BTreeMap<String, Pipeline>,
    by_path: HashMap<String, usize>,
}

impl ModelIndex {
    /// A model by its relative path (already validated by the caller).
    pub fn get(&self, path: &str) -> Option<&ModelEntry> {
        self.by_path.get(path).and_then(|&i| self.models.get(i))
    }

    /// The node type a model was built for, as its pipeline's index describes it.
    pub fn node_type_info(&self, model: &ModelEntry) -> Option<&NodeTypeInfo> {
        let pipeline = self.pipelines.get(model.pipeline_dir.as_deref()?)?;
        pipeline.node_types.get(&model.node_type?)
    }

    /// Walks `root` and loads every model file. Fails only when `root` itself cannot be
    /// read; everything below it that fails is listed in [`ModelIndex::broken`].
    pub fn scan(root: &Path) -> Result<ModelIndex> {
        let root = root
            .canonicalize()
            .with_context(|| format!("model directory {}", root.display()))?;
        if !root.is_dir() {
            bail!("model directory {} is not a directory", root.display());
        }
        let root_name = root
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("models")
            .to_string();
        let mut index = ModelIndex::default();
        let found = walk(&root, &mut index.broken);

        // Pipelines: the directories above a layout, and those holding pipeline metadata.
        let mut tables = Tables::new();
        for file in &found {
            let Some((name, parents)) = file.rel.split_last() else {
                continue;
            };
            let dir = parents.join("/");
            if name == "node_type_index.json" {
                let pipeline = pipeline_at(&mut index.pipelines, &dir, &root_name);
                match metadata::node_type_index(&file.path) {
                    Ok((types, problems)) => {
                        pipeline.node_types = types;
                        for p in problems {
                            index.broken.push(broken(&file.rel, p));
                        }
                    }
                    Err(e) => index.broken.push(broken(&file.rel, format!("{e:#}"))),
                }
            } else if let Some((source, output)) = metadata::table_name(name) {
                pipeline_at(&mut index.pipelines, &dir, &root_name);
                match metadata::accuracy_table(&file.path) {
                    Ok(t) => {
                        tables.insert((dir, source, output), t);
                    }
                    Err(e) => index.broken.push(broken(&file.rel, format!("{e:#}"))),
                }
            }
        }

        let mut candidates = 0usize;
        for file in &found {
            let Some(file_name) = file.rel.last() else {
                continue;
            };
            let Some((stem, format)) = model_file_name(file_name) else {
                continue;
            };
            if file_name == "node_type_index.json" || file_name == "metadata.json" {
                continue;
            }
            candidates += 1;
            if candidates > MAX_MODEL_FILES {
                index.broken.push(broken(
                    &file.rel,
                    format!("more than {MAX_MODEL_FILES} model files; the rest are not indexed"),
                ));
                break;
            }
            match load_entry(
                file,
                stem,
                format,
                &root_name,
                &tables,
                &mut index.pipelines,
            ) {
                Ok(entry) => index.models.push(entry),
                Err(e) => {
                    let b = broken(&file.rel, format!("{e:#}"));
                    tracing::warn!(path = %b.path, error = %b.error, "model file does not load; not served");
                    index.broken.push(b);
                }
            }
        }
        index.models.sort_by(|a, b| a.path.cmp(&b.path));
        index.broken.sort_by(|a, b| a.path.cmp(&b.path));
        index.by_path = index
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.path.clone(), i))
            .collect();
        Ok(index)
    }
}

/// A regular file found under the model directory (or a symlink to one inside it).
struct Found {
    /// Path components relative to the model directory.
    rel: Vec<String>,
    /// Where to read it (the symlink's target, for a symlink).
    path: PathBuf,
}

fn broken(rel: &[String], error: impl Into<String>) -> Broken {
    Broken {
        path: rel.join("/"),
        error: error.into(),
    }
}

/// Lists the regular files below `root`, without following symlinked directories and
/// without files whose symlinks lead outside `root` (both listed as broken). Hidden entries
/// (`.git`, editor files) are skipped.
fn walk(root: &Path, problems: &mut Vec<Broken>) -> Vec<Found> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), Vec::<String>::new())];
    while let Some((dir, rel)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                problems.push(broken(&rel, format!("cannot read directory: {e}")));
                continue;
            }
        };
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                problems.push(broken(
                    &rel,
                    format!("{:?}: name is not UTF-8", entry.file_name()),
                ));
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let mut child = rel.clone();
            child.push(name);
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if child.len() < MAX_DEPTH {
                    stack.push((entry.path(), child));
                } else {
                    problems.push(broken(
                        &child,
                        format!("deeper than {MAX_DEPTH} levels; not walked"),
                    ));
                }
            } else if kind.is_symlink() {
                match entry.path().canonicalize() {
                    Err(e) => problems.push(broken(&child, format!("dangling symlink: {e}"))),
                    Ok(target) if !target.starts_with(root) => problems.push(broken(
                        &child,
                        "symlink leads outside the model directory; not served",
                    )),
                    Ok(target) if target.is_file() => found.push(Found {
                        rel: child,
                        path: target,
                    }),
                    Ok(_) => problems.push(broken(&child, "symlink to a directory; not followed")),
                }
            } else if kind.is_file() {
                found.push(Found {
                    rel: child,
                    path: entry.path(),
                });
            }
        }
    }
    found
}

/// `SGDRegressorTrainer_0.json` → (`SGDRegressorTrainer_0`, Json).
fn model_file_name(file_name: &str) -> Option<(&str, FileFormat)> {
    let (stem, ext) = file_name.rsplit_once('.')?;
    Some((stem, FileFormat::from_extension(ext)?)).filter(|(s, _)| !s.is_empty())
}

fn pipeline_at<'a>(
    pipelines: &'a mut BTreeMap<String, Pipeline>,
    dir: &str,
    root_name: &str,
) -> &'a mut Pipeline {
    pipelines
        .entry(dir.to_string())
        .or_insert_with(|| Pipeline {
            name: dir
                .rsplit('/')
                .next()
                .filter(|n| !n.is_empty())
                .unwrap_or(root_name)
                .to_string(),
            node_types: BTreeMap::new(),
        })
}

/// Where a file sits in the model-DB layout: (pipeline dir, source, output type, group).
fn layout(rel: &[String]) -> Option<(String, &str, OutputType, &str)> {
    let (_file, dirs) = rel.split_last()?;
    let (group, dirs) = dirs.split_last()?;
    let (output, dirs) = dirs.split_last()?;
    let (source, pipeline) = dirs.split_last()?;
    let output = OutputType::from_dir(output)?;
    Some((pipeline.join("/"), source.as_str(), output, group.as_str()))
}

/// `SGDRegressorTrainer_12` → 12.
fn node_type_of(name: &str) -> Option<u32> {
    let (_, n) = name.rsplit_once('_')?;
    n.parse()
        .ok()
        .filter(|_| n.bytes().all(|b| b.is_ascii_digit()))
}

fn load_entry(
    file: &Found,
    stem: &str,
    format: FileFormat,
    root_name: &str,
    tables: &Tables,
    pipelines: &mut BTreeMap<String, Pipeline>,
) -> Result<ModelEntry> {
    let file_name = file.rel.last().map(String::as_str);
    let bytes = metadata::read_bounded(&file.path, kepler_models::MAX_MODEL_FILE_BYTES)?;
    let model = kepler_models::load_model_bytes(&bytes, file_name, None)?;
    let model_name = model.name().map(str::to_string);
    let trainer = file_name
        .and_then(|f| Trainer::from_file_name(f).ok().flatten())
        .or_else(|| {
            model_name
                .as_deref()
                .and_then(|n| Trainer::from_file_name(n).ok().flatten())
        });
    let node_type = node_type_of(stem).or_else(|| model_name.as_deref().and_then(node_type_of));
    let components = model.components();
    let file_meta = match format {
        FileFormat::Zip => metadata::archive_metadata(&bytes).unwrap_or_default(),
        FileFormat::Json => serde_json::from_slice(&bytes)
            .map(|v| metadata::json_metadata(&v))
            .unwrap_or_default(),
    };

    let (pipeline_dir, pipeline, source, output_type, feature_group, accuracy) =
        match layout(&file.rel) {
            Some((dir, source, output, group)) => {
                let name = pipeline_at(pipelines, &dir, root_name).name.clone();
                let row = tables
                    .get(&(dir.clone(), source.to_string(), output))
                    .and_then(|t| t.get(&(group.to_string(), stem.to_string())))
                    .cloned();
                (
                    Some(dir),
                    Some(name),
                    Some(source.to_string()),
                    Some(output),
                    Some(group.to_string()),
                    row.unwrap_or(file_meta.accuracy),
                )
            }
            None => {
                let output = file_meta.output_type.or_else(|| {
                    OutputType::ALL
                        .into_iter()
                        .find(|t| stem.contains(t.as_str()))
                });
                // A plain file names no source: platform power is what ACPI-like sources
                // measure, the other components are RAPL's.
                let source = if components.iter().any(|c| c == "platform") {
                    "acpi"
                } else {
                    "rapl-sysfs"
                };
                (
                    None,
                    None,
                    Some(source.to_string()),
                    output,
                    None,
                    file_meta.accuracy,
                )
            }
        };
    Ok(ModelEntry {
        path: file.rel.join("/"),
        name: stem.to_string(),
        format,
        pipeline_dir,
        pipeline,
        source,
        output_type,
        feature_group,
        trainer,
        node_type,
        kind: model.kind(),
        features: names(model.features()),
        declared_features: names(model.declared_features()),
        components,
        accuracy,
        bytes: bytes.into(),
    })
}

/// Kepler's names of the features, as requests and listings spell them.
fn names(features: Vec<kepler_models::Feature>) -> Vec<String> {
    features.iter().map(|f| f.as_str().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_positions() {
        let rel: Vec<String> = "v0.7/ec2/rapl-sysfs/AbsPower/BPFOnly/X_0.json"
            .split('/')
            .map(String::from)
            .collect();
        let (dir, source, output, group) = layout(&rel).expect("layout");
        assert_eq!(
            (dir.as_str(), source, output, group),
            ("v0.7/ec2", "rapl-sysfs", OutputType::AbsPower, "BPFOnly")
        );
        let plain: Vec<String> = vec!["a".into(), "X_0.json".into()];
        assert!(layout(&plain).is_none());
    }

    #[test]
    fn node_type_suffixes() {
        assert_eq!(node_type_of("SGDRegressorTrainer_12"), Some(12));
        assert_eq!(node_type_of("SGDRegressorTrainer"), None);
        assert_eq!(node_type_of("x_+1"), None);
        assert_eq!(model_file_name("a.b.zip"), Some(("a.b", FileFormat::Zip)));
        assert_eq!(model_file_name(".json"), None);
        assert_eq!(model_file_name("a.csv"), None);
    }
}
