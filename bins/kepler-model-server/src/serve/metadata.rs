//! The files of a model-DB pipeline that describe its models rather than hold them:
//! `node_type_index.json` (which machines each node type number stands for),
//! `<source>_<OutputType>_model_metadata.csv` (the accuracy table) and an archive's own
//! `metadata.json`.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use kepler_models::builtin::MachineSpec;
use serde_json::Value;

use super::types::{Accuracy, OutputType};

/// Largest metadata file read (the SPECpower table is 535 KB).
const MAX_METADATA_BYTES: u64 = 64 << 20;

/// Reads a whole file, refusing more than [`MAX_METADATA_BYTES`]; bounded by the read itself,
/// since FIFOs and device files report no true size.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(limit + 1).read_to_end(&mut bytes))
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!("{} is larger than {limit} bytes", path.display());
    }
    Ok(bytes)
}

/// One node type of a pipeline: the machine it describes and the machines it was built from.
#[derive(Debug, Clone)]
pub struct NodeTypeInfo {
    pub spec: MachineSpec,
    pub members: Vec<String>,
}

/// Parses `node_type_index.json`: `{"<n>": {"attrs": {machine spec}, "members": [..]}}`.
/// Entries that do not parse are returned as problems, the others kept.
pub fn node_type_index(path: &Path) -> Result<(BTreeMap<u32, NodeTypeInfo>, Vec<String>)> {
    let bytes = read_bounded(path, MAX_METADATA_BYTES)?;
    let value: Value =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let Value::Object(map) = value else {
        bail!("{} is not a JSON object", path.display());
    };
    let mut types = BTreeMap::new();
    let mut problems = Vec::new();
    for (key, entry) in map {
        let Ok(id) = key.parse::<u32>() else {
            problems.push(format!("node type {key:?} is not a number"));
            continue;
        };
        let spec = match entry.get("attrs").map(MachineSpec::from_spec_value) {
            Some(Ok(spec)) => spec,
            Some(Err(e)) => {
                problems.push(format!("node type {id}: {e}"));
                continue;
            }
            None => {
                problems.push(format!("node type {id} has no attrs"));
                continue;
            }
        };
        let members = entry
            .get("members")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        types.insert(id, NodeTypeInfo { spec, members });
    }
    Ok((types, problems))
}

/// A metadata table's file name, `<source>_<OutputType>_model_metadata.csv`, split.
pub fn table_name(file_name: &str) -> Option<(String, OutputType)> {
    let stem = file_name.strip_suffix("_model_metadata.csv")?;
    let (source, output) = stem.rsplit_once('_')?;
    Some((source.to_string(), OutputType::from_dir(output)?))
}

/// Accuracy per (feature group, model name) from one metadata table. Rows without a model
/// name or feature group are skipped; numeric columns named `mae`, `mape`,
/// `<component>_mae`, `<component>_mape` are read.
pub fn accuracy_table(path: &Path) -> Result<HashMap<(String, String), Accuracy>> {
    let bytes = read_bounded(path, MAX_METADATA_BYTES)?;
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(bytes.as_slice());
    let headers = reader
        .headers()
        .with_context(|| format!("reading the header of {}", path.display()))?
        .clone();
    let column = |name: &str| headers.iter().position(|h| h == name);
    let (Some(name_col), Some(group_col)) = (column("model_name"), column("feature_group")) else {
        bail!(
            "{} has no model_name and feature_group columns",
            path.display()
        );
    };
    let figure_cols: Vec<(usize, &str)> = headers
        .iter()
        .enumerate()
        .filter(|(_, h)| *h == "mae" || *h == "mape" || h.ends_with("_mae") || h.ends_with("_mape"))
        .collect();
    let mut table = HashMap::new();
    for (line, record) in reader.records().enumerate() {
        let record = record.with_context(|| format!("{} row {}", path.display(), line + 2))?;
        let (Some(name), Some(group)) = (record.get(name_col), record.get(group_col)) else {
            continue;
        };
        if name.is_empty() || group.is_empty() {
            continue;
        }
        let figures = figure_cols.iter().filter_map(|(i, h)| {
            record
                .get(*i)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map(|v| (*h, v))
        });
        table.insert(
            (group.to_string(), name.to_string()),
            Accuracy::from_figures(figures),
        );
    }
    Ok(table)
}

/// What an archive's `metadata.json` or a weight JSON's top level says about the model:
/// its output type and accuracy, when present.
#[derive(Debug, Default)]
pub struct FileMetadata {
    pub output_type: Option<OutputType>,
    pub accuracy: Accuracy,
}

/// Largest `metadata.json` read from an archive; the published ones are under 1 KB.
const MAX_ARCHIVE_METADATA: u64 = 1 << 20;

pub fn archive_metadata(bytes: &[u8]) -> Option<FileMetadata> {
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).ok()?;
    let member = zip.by_name("metadata.json").ok()?;
    let mut text = Vec::new();
    member
        .take(MAX_ARCHIVE_METADATA + 1)
        .read_to_end(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_ARCHIVE_METADATA {
        return None;
    }
    let value: Value = serde_json::from_slice(&text).ok()?;
    Some(json_metadata(&value))
}

/// The descriptive keys of a metadata object (archive `metadata.json`, or the top level of a
/// weight JSON, where they sit beside the components).
pub fn json_metadata(value: &Value) -> FileMetadata {
    let Value::Object(map) = value else {
        return FileMetadata::default();
    };
    let output_type = map
        .get("output_type")
        .and_then(Value::as_str)
        .and_then(OutputType::from_dir);
    let figures = map
        .iter()
        .filter(|(k, _)| *k == "mae" || *k == "mape" || k.ends_with("_mae") || k.ends_with("_mape"))
        .filter_map(|(k, v)| v.as_f64().map(|v| (k.as_str(), v)));
    FileMetadata {
        output_type,
        accuracy: Accuracy::from_figures(figures),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_split_source_and_output_type() {
        assert_eq!(
            table_name("rapl-sysfs_AbsPower_model_metadata.csv"),
            Some(("rapl-sysfs".to_string(), OutputType::AbsPower))
        );
        assert_eq!(
            table_name("acpi_DynPower_model_metadata.csv"),
            Some(("acpi".to_string(), OutputType::DynPower))
        );
        assert_eq!(table_name("acpi_Other_model_metadata.csv"), None);
        assert_eq!(table_name("metadata.csv"), None);
    }

    #[test]
    fn tables_are_read_by_column_name() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("rapl-sysfs_AbsPower_model_metadata.csv");
        std::fs::write(
            &path,
            ",model_name,mae,mape,package_mae,package_mape,dram_mae,dram_mape,feature_group\n\
             0,A_0,5.0,1.0,5.0,9.0,1.0,1.0,BPFOnly\n\
             1,B_0,not a number,,,,,,BPFOnly\n\
             2,,1,1,,,,,BPFOnly\n",
        )?;
        let t = accuracy_table(&path)?;
        let a = &t[&("BPFOnly".to_string(), "A_0".to_string())];
        assert_eq!((a.mae, a.mape), (Some(5.0), Some(9.0)));
        assert_eq!(
            t[&("BPFOnly".to_string(), "B_0".to_string())],
            Accuracy::default()
        );
        assert_eq!(t.len(), 2);
        std::fs::write(&path, "a,b\n1,2\n")?;
        assert!(accuracy_table(&path).is_err());
        Ok(())
    }
}
