//! Training datasets: node feature rates and measured power per component, one row per
//! interval, as `kepler-model-server collect` writes them and `train` reads them.
//!
//! # Dataset CSV (the format `collect` writes)
//!
//! - a header row, then one row per interval (a fixed step);
//! - `timestamp`: the end of the interval, Unix seconds (fractions allowed);
//! - one column per node feature, named with Kepler's feature names (`bpf_cpu_time_ms`,
//!   `bpf_page_cache_hit`, `cpu_instructions`, ...): the per-second rate over the interval,
//!   summed over the node;
//! - one column per power component, `<component>_power` (`package_power`, `core_power`,
//!   `uncore_power`, `dram_power`, `platform_power`): the mean power over the interval in W
//!   (energy delta / interval);
//! - any other column is ignored (logged once), so the model DB's preprocessed CSVs
//!   (`preprocess_abs_default_rapl_Basic.csv`: extra `cgroupfs_*`, `node_type`, an unnamed
//!   index column, the legacy `bpf_cpu_time_us` name) read as they are.
//!
//! # Machine spec sidecar
//!
//! `run.csv` may have `run.spec.json` beside it: the node-type attributes of the model DB's
//! `node_type_index.json` (`{"processor": "intel_xeon_e5_2686v4", "cores": 72, "chips": 2,
//! "memory": 503, "frequency": 3000}`; cores are logical CPUs, memory GiB, frequency MHz),
//! every key optional, plus an optional `source` (`rapl-sysfs`, `acpi`).
//!
//! Rows with a NaN, infinite or negative value are skipped and counted
//! ([`Dataset::skipped_rows`]); a malformed file (bad number, wrong field count, no
//! feature or no power column) is an error naming the line and column.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::features::{canonical_feature, Feature};

/// Largest dataset file read: a week at a 1 s step with every column is about 100 MB.
pub const MAX_DATASET_BYTES: u64 = 1 << 30;

/// The timestamp column's name.
pub const TIMESTAMP: &str = "timestamp";
/// Power columns are named `<component>` + this suffix.
pub const POWER_SUFFIX: &str = "_power";

/// Why a dataset could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is too large ({size} bytes, limit {MAX_DATASET_BYTES})")]
    TooLarge { path: PathBuf, size: u64 },
    #[error("malformed CSV {what}: {message}")]
    Malformed { what: String, message: String },
    #[error("{what} has no {missing} column (expected {expected})")]
    MissingColumn {
        what: String,
        missing: &'static str,
        expected: String,
    },
    #[error("{what} has no usable rows ({skipped} skipped for NaN, infinite or negative values)")]
    Empty { what: String, skipped: usize },
    #[error("invalid machine spec {path}: {message}")]
    Spec { path: PathBuf, message: String },
    #[error("cannot write dataset: {0}")]
    Write(String),
}

/// The machine a dataset was recorded on: the model DB's node-type attributes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processor: Option<String>,
    /// Logical CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chips: Option<u32>,
    /// GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Maximum frequency, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency: Option<u64>,
    /// The power source the energy came from (`rapl-sysfs`, `acpi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl MachineSpec {
    /// The sidecar path of a dataset: `run.csv` → `run.spec.json`.
    pub fn sidecar_path(dataset: &Path) -> PathBuf {
        dataset.with_extension("spec.json")
    }

    /// Reads the sidecar of `dataset`; `None` when there is none.
    pub fn read_sidecar(dataset: &Path) -> Result<Option<MachineSpec>, DatasetError> {
        let path = Self::sidecar_path(dataset);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(DatasetError::Io { path, source }),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| DatasetError::Spec {
                path,
                message: e.to_string(),
            })
    }
}

/// A training dataset: column-major, every column as long as `timestamps`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dataset {
    pub timestamps: Vec<f64>,
    /// Feature rates per interval, in [`Feature::ALL`] order.
    pub features: Vec<(Feature, Vec<f64>)>,
    /// Mean power per interval in W, by component name (`package`, `dram`, `platform`).
    pub power: Vec<(String, Vec<f64>)>,
    pub spec: Option<MachineSpec>,
    /// Rows dropped for non-finite or negative values.
    pub skipped_rows: usize,
}

impl Dataset {
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }

    /// The column of `feature`, if the dataset has it.
    pub fn feature(&self, feature: Feature) -> Option<&[f64]> {
        self.features
            .iter()
            .find(|(f, _)| *f == feature)
            .map(|(_, v)| v.as_slice())
    }

    /// Builds a dataset from rows, skipping (and counting) rows with non-finite or negative
    /// values. `what` names the input in errors.
    pub fn from_rows(
        what: &str,
        features: &[Feature],
        components: &[String],
        rows: impl IntoIterator<Item = (f64, Vec<f64>, Vec<f64>)>,
    ) -> Result<Dataset, DatasetError> {
        check_columns(what, features, components)?;
        let mut d = Dataset {
            features: features.iter().map(|f| (*f, Vec::new())).collect(),
            power: components.iter().map(|c| (c.clone(), Vec::new())).collect(),
            ..Dataset::default()
        };
        for (ts, f, p) in rows {
            if f.len() != features.len() || p.len() != components.len() {
                return Err(DatasetError::Malformed {
                    what: what.into(),
                    message: "a row has the wrong number of values".into(),
                });
            }
            let ok = |v: &f64| v.is_finite() && *v >= 0.0;
            if !ts.is_finite() || !f.iter().all(ok) || !p.iter().all(ok) {
                d.skipped_rows += 1;
                continue;
            }
            d.timestamps.push(ts);
            for ((_, col), v) in d.features.iter_mut().zip(f) {
                col.push(v);
            }
            for ((_, col), v) in d.power.iter_mut().zip(p) {
                col.push(v);
            }
        }
        if d.is_empty() {
            return Err(DatasetError::Empty {
                what: what.into(),
                skipped: d.skipped_rows,
            });
        }
        if d.skipped_rows > 0 {
            tracing::warn!(
                input = what,
                skipped = d.skipped_rows,
                "rows with NaN, infinite or negative values skipped"
            );
        }
        Ok(d)
    }

    /// Reads a dataset CSV (and its machine-spec sidecar, if any).
    pub fn read_csv_file(path: &Path) -> Result<Dataset, DatasetError> {
        let io = |source| DatasetError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        if size > MAX_DATASET_BYTES {
            return Err(DatasetError::TooLarge {
                path: path.to_path_buf(),
                size,
            });
        }
        let mut d = Dataset::read_csv(file.take(MAX_DATASET_BYTES), &path.display().to_string())?;
        d.spec = MachineSpec::read_sidecar(path)?;
        Ok(d)
    }

    /// Reads a dataset CSV from `r`; `what` names it in errors.
    pub fn read_csv(r: impl Read, what: &str) -> Result<Dataset, DatasetError> {
        let malformed = |message: String| DatasetError::Malformed {
            what: what.into(),
            message,
        };
        let mut reader = csv::ReaderBuilder::new().flexible(false).from_reader(r);
        let headers = reader
            .headers()
            .map_err(|e| malformed(e.to_string()))?
            .clone();
        let mut ts_col = None;
        let mut feature_cols: Vec<(Feature, usize)> = Vec::new();
        let mut power_cols: Vec<(String, usize)> = Vec::new();
        let mut ignored = Vec::new();
        for (i, h) in headers.iter().enumerate() {
            let h = h.trim();
            if h == TIMESTAMP {
                ts_col = Some(i);
            } else if let Ok(f) = canonical_feature(h).parse::<Feature>() {
                // The current name wins over the legacy one when a file has both.
                if let Some(pos) = feature_cols.iter().position(|(g, _)| *g == f) {
                    if h == f.as_str() {
                        feature_cols[pos] = (f, i);
                    }
                } else {
                    feature_cols.push((f, i));
                }
            } else if let Some(c) = h.strip_suffix(POWER_SUFFIX).filter(|c| is_component(c)) {
                power_cols.push((c.to_string(), i));
            } else {
                ignored.push(h.to_string());
            }
        }
        if !ignored.is_empty() {
            tracing::debug!(input = what, columns = ?ignored, "columns ignored");
        }
        let ts_col = ts_col.ok_or_else(|| DatasetError::MissingColumn {
            what: what.into(),
            missing: "timestamp",
            expected: TIMESTAMP.into(),
        })?;
        feature_cols.sort_by_key(|(f, _)| Feature::ALL.iter().position(|g| g == f));
        let features: Vec<Feature> = feature_cols.iter().map(|(f, _)| *f).collect();
        let components: Vec<String> = power_cols.iter().map(|(c, _)| c.clone()).collect();
        check_columns(what, &features, &components)?;
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| malformed(e.to_string()))?;
            let line = record.position().map_or(0, |p| p.line());
            let num = |i: usize| -> Result<f64, DatasetError> {
                let text = record.get(i).unwrap_or("").trim();
                text.parse::<f64>().map_err(|_| {
                    malformed(format!(
                        "line {line}, column {}: {text:?} is not a number",
                        headers.get(i).unwrap_or("?")
                    ))
                })
            };
            let f = feature_cols
                .iter()
                .map(|(_, i)| num(*i))
                .collect::<Result<Vec<_>, _>>()?;
            let p = power_cols
                .iter()
                .map(|(_, i)| num(*i))
                .collect::<Result<Vec<_>, _>>()?;
            rows.push((num(ts_col)?, f, p));
        }
        Dataset::from_rows(what, &features, &components, rows)
    }

    /// Writes the dataset as CSV (the format [`Dataset::read_csv`] reads).
    pub fn write_csv(&self, w: impl Write) -> Result<(), DatasetError> {
        let features: Vec<Feature> = self.features.iter().map(|(f, _)| *f).collect();
        let components: Vec<String> = self.power.iter().map(|(c, _)| c.clone()).collect();
        let n = self.len();
        if self
            .features
            .iter()
            .map(|(_, c)| c.len())
            .chain(self.power.iter().map(|(_, c)| c.len()))
            .any(|l| l != n)
        {
            return Err(DatasetError::Write("columns of different lengths".into()));
        }
        let mut out = DatasetWriter::new(w, &features, &components)?;
        for (i, ts) in self.timestamps.iter().enumerate() {
            let at = |c: &Vec<f64>| c.get(i).copied().unwrap_or(f64::NAN);
            let f: Vec<f64> = self.features.iter().map(|(_, c)| at(c)).collect();
            let p: Vec<f64> = self.power.iter().map(|(_, c)| at(c)).collect();
            out.write_row(*ts, &f, &p)?;
        }
        out.flush()
    }
}

/// Writes a dataset CSV row by row (what `collect` appends to as it runs).
pub struct DatasetWriter<W: Write> {
    csv: csv::Writer<W>,
    features: usize,
    components: usize,
}

impl<W: Write> DatasetWriter<W> {
    /// Writes the header: `timestamp`, the features, then `<component>_power`.
    pub fn new(w: W, features: &[Feature], components: &[String]) -> Result<Self, DatasetError> {
        check_columns("the dataset", features, components)?;
        let mut csv = csv::Writer::from_writer(w);
        let header = std::iter::once(TIMESTAMP.to_string())
            .chain(features.iter().map(|f| f.as_str().to_string()))
            .chain(components.iter().map(|c| format!("{c}{POWER_SUFFIX}")));
        csv.write_record(header)
            .map_err(|e| DatasetError::Write(e.to_string()))?;
        Ok(DatasetWriter {
            csv,
            features: features.len(),
            components: components.len(),
        })
    }

    /// Appends a row of the header's shape.
    pub fn write_row(
        &mut self,
        ts: f64,
        features: &[f64],
        power: &[f64],
    ) -> Result<(), DatasetError> {
        if features.len() != self.features || power.len() != self.components {
            return Err(DatasetError::Write(
                "a row does not match the header".into(),
            ));
        }
        let fields = std::iter::once(ts)
            .chain(features.iter().copied())
            .chain(power.iter().copied())
            .map(|v| v.to_string());
        self.csv
            .write_record(fields)
            .map_err(|e| DatasetError::Write(e.to_string()))
    }

    pub fn flush(&mut self) -> Result<(), DatasetError> {
        self.csv
            .flush()
            .map_err(|e| DatasetError::Write(e.to_string()))
    }
}

/// `package`, `dram`, `platform`, `gpu0`: lowercase letters, digits and `_`.
fn is_component(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn check_columns(
    what: &str,
    features: &[Feature],
    components: &[String],
) -> Result<(), DatasetError> {
    if features.is_empty() {
        return Err(DatasetError::MissingColumn {
            what: what.into(),
            missing: "feature",
            expected: Feature::ALL.map(|f| f.as_str()).join(", "),
        });
    }
    if components.is_empty() {
        return Err(DatasetError::MissingColumn {
            what: what.into(),
            missing: "power",
            expected: "<component>_power, e.g. package_power, dram_power, platform_power".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_model_db_preprocessed_csv_and_roundtrips() {
        let text = "timestamp,bpf_cpu_time_us,cache_miss,node_type,package_power,dram_power,packge_ratio_package\n\
                    1,100,5,1,40.5,10,1.0\n2,200,6,1,50,11,1.0\n3,nan,6,1,50,11,1.0\n";
        let d = Dataset::read_csv(text.as_bytes(), "t").unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!(d.skipped_rows, 1);
        assert_eq!(d.feature(Feature::BpfCpuTimeMs), Some(&[100.0, 200.0][..]));
        assert_eq!(d.power[0], ("package".to_string(), vec![40.5, 50.0]));
        let mut out = Vec::new();
        d.write_csv(&mut out).unwrap();
        let back = Dataset::read_csv(out.as_slice(), "t").unwrap();
        assert_eq!(back.features, d.features);
        assert_eq!(back.power, d.power);
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let e = Dataset::read_csv("timestamp,bpf_cpu_time_ms\n1,2\n".as_bytes(), "x").unwrap_err();
        assert!(e.to_string().contains("no power column"), "{e}");
        let e = Dataset::read_csv("timestamp,package_power\n1,2\n".as_bytes(), "x").unwrap_err();
        assert!(e.to_string().contains("no feature column"), "{e}");
        let e = Dataset::read_csv(
            "timestamp,bpf_cpu_time_ms,package_power\n1,x,3\n".as_bytes(),
            "x",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("line 2, column bpf_cpu_time_ms"),
            "{e}"
        );
        let e = Dataset::read_csv(
            "timestamp,bpf_cpu_time_ms,package_power\n1,2\n".as_bytes(),
            "x",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("malformed CSV"), "{e}");
        let e = Dataset::read_csv("timestamp,bpf_cpu_time_ms,package_power\n".as_bytes(), "x")
            .unwrap_err();
        assert!(matches!(e, DatasetError::Empty { .. }), "{e}");
        let e = Dataset::read_csv(
            "timestamp,bpf_cpu_time_ms,package_power\n1,inf,3\n".as_bytes(),
            "x",
        )
        .unwrap_err();
        assert!(matches!(e, DatasetError::Empty { skipped: 1, .. }), "{e}");
    }
}
