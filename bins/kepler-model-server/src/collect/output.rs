//! The dataset file `collect` appends to: the dataset CSV of `kepler_models::dataset`
//! (`timestamp`, the features, `<component>_power`) plus a `phase` column, the index of the
//! plan phase a row was recorded in. `train` ignores that column; a restarted `collect`
//! reads it to continue the plan where the file ends.
//!
//! Each row is written whole with one `write` on an unbuffered file, so a killed run leaves
//! at most one partial last line, which the next run cuts off.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kepler_models::dataset::{MAX_DATASET_BYTES, POWER_SUFFIX, TIMESTAMP};
use kepler_models::Feature;

use super::scrape::Reading;

/// The column naming each row's plan phase.
pub const PHASE: &str = "phase";

/// Where an existing file ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The last row's phase; `None` when the file holds only its header.
    pub last_phase: Option<usize>,
    /// Rows recorded in that phase.
    pub rows_in_last_phase: usize,
    pub rows: usize,
}

pub struct DatasetFile {
    path: PathBuf,
    file: File,
    pub features: Vec<Feature>,
    pub components: Vec<String>,
}

impl DatasetFile {
    /// Creates the file with its header (fails if it exists).
    pub fn create(path: &Path, features: Vec<Feature>, components: Vec<String>) -> Result<Self> {
        if features.is_empty() || components.is_empty() {
            bail!("a dataset needs at least one feature and one power column");
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        let header: Vec<String> = std::iter::once(TIMESTAMP.to_string())
            .chain(features.iter().map(|f| f.as_str().to_string()))
            .chain(components.iter().map(|c| format!("{c}{POWER_SUFFIX}")))
            .chain(std::iter::once(PHASE.to_string()))
            .collect();
        file.write_all(format!("{}\n", header.join(",")).as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(DatasetFile {
            path: path.to_path_buf(),
            file,
            features,
            components,
        })
    }

    /// Opens a file an earlier run wrote, for appending; `None` when there is none (or it is
    /// empty). Its header fixes the columns; a partial last line is cut off.
    pub fn resume(path: &Path) -> Result<Option<(Self, Ended)>> {
        let mut file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        let mut text = String::new();
        (&mut file)
            .take(MAX_DATASET_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading {}", path.display()))?;
        if text.len() as u64 > MAX_DATASET_BYTES {
            bail!("{} is larger than a dataset may be", path.display());
        }
        if text.is_empty() {
            return Ok(None);
        }
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        if complete < text.len() {
            tracing::warn!(path = %path.display(), "cutting off a partial last line left by an interrupted run");
            file.set_len(complete as u64)
                .with_context(|| format!("truncating {}", path.display()))?;
        }
        let mut lines = text[..complete].lines();
        let Some(header) = lines.next() else {
            bail!(
                "{} has no complete header line; remove it to start over",
                path.display()
            );
        };
        let (features, components) = parse_header(header)
            .with_context(|| format!("{} is not a dataset collect wrote", path.display()))?;
        let mut ended = Ended {
            last_phase: None,
            rows_in_last_phase: 0,
            rows: 0,
        };
        for (n, line) in lines.enumerate() {
            let phase: usize = line
                .rsplit(',')
                .next()
                .and_then(|p| p.trim().parse().ok())
                .with_context(|| format!("{} line {}: no phase", path.display(), n + 2))?;
            if ended.last_phase == Some(phase) {
                ended.rows_in_last_phase += 1;
            } else {
                ended.last_phase = Some(phase);
                ended.rows_in_last_phase = 1;
            }
            ended.rows += 1;
        }
        file.seek(SeekFrom::End(0))
            .with_context(|| format!("seeking in {}", path.display()))?;
        Ok(Some((
            DatasetFile {
                path: path.to_path_buf(),
                file,
                features,
                components,
            },
            ended,
        )))
    }

    /// Appends one row; a column the reading lacks is written as NaN (`train` skips the row
    /// and counts it).
    pub fn append(&mut self, timestamp: f64, reading: &Reading, phase: usize) -> Result<()> {
        let mut line = String::with_capacity(128);
        line.push_str(&timestamp.to_string());
        for f in &self.features {
            line.push(',');
            line.push_str(
                &reading
                    .features
                    .get(f)
                    .copied()
                    .unwrap_or(f64::NAN)
                    .to_string(),
            );
        }
        for c in &self.components {
            line.push(',');
            line.push_str(
                &reading
                    .power
                    .get(c)
                    .copied()
                    .unwrap_or(f64::NAN)
                    .to_string(),
            );
        }
        line.push(',');
        line.push_str(&phase.to_string());
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// The columns of a header `collect` wrote.
fn parse_header(header: &str) -> Result<(Vec<Feature>, Vec<String>)> {
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let (Some(&first), Some(&last)) = (cols.first(), cols.last()) else {
        bail!("empty header");
    };
    if first != TIMESTAMP || last != PHASE || cols.len() < 4 {
        bail!("the header must start with {TIMESTAMP} and end with {PHASE}");
    }
    let mut features = Vec::new();
    let mut components = Vec::new();
    for c in &cols[1..cols.len() - 1] {
        if let Some(component) = c.strip_suffix(POWER_SUFFIX) {
            components.push(component.to_string());
        } else {
            features.push(
                c.parse::<Feature>()
                    .map_err(|_| anyhow::anyhow!("unknown column {c:?}"))?,
            );
        }
    }
    if features.is_empty() || components.is_empty() {
        bail!("no feature or no power column");
    }
    Ok((features, components))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(cpu: f64, package: f64) -> Reading {
        let mut r = Reading::default();
        r.features.insert(Feature::BpfCpuTimeMs, cpu);
        r.power.insert("package".into(), package);
        r
    }

    #[test]
    fn rows_append_and_resume_where_the_file_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.csv");
        assert!(DatasetFile::resume(&path).unwrap().is_none());
        let mut f = DatasetFile::create(&path, vec![Feature::BpfCpuTimeMs], vec!["package".into()])
            .unwrap();
        f.append(1.5, &reading(100.0, 20.0), 0).unwrap();
        f.append(2.5, &reading(900.0, 40.0), 1).unwrap();
        f.append(3.5, &Reading::default(), 1).unwrap();
        drop(f);
        // A run killed mid-line.
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(b"4.5,12").unwrap();
        drop(raw);

        let (mut f, ended) = DatasetFile::resume(&path).unwrap().unwrap();
        assert_eq!(
            ended,
            Ended {
                last_phase: Some(1),
                rows_in_last_phase: 2,
                rows: 3
            }
        );
        f.append(5.5, &reading(10.0, 15.0), 2).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "timestamp,bpf_cpu_time_ms,package_power,phase\n1.5,100,20,0\n2.5,900,40,1\n\
             3.5,NaN,NaN,1\n5.5,10,15,2\n"
        );
        // What train reads: the NaN row skipped and counted, the phase column ignored.
        let d = kepler_models::dataset::Dataset::read_csv_file(&path).unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(d.skipped_rows, 1);
        assert_eq!(
            d.feature(Feature::BpfCpuTimeMs).unwrap(),
            [100.0, 900.0, 10.0]
        );
    }

    #[test]
    fn foreign_files_are_not_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.csv");
        std::fs::write(&path, "a,b\n1,2\n").unwrap();
        assert!(DatasetFile::resume(&path).is_err());
        assert!(DatasetFile::create(&path, vec![Feature::BpfCpuTimeMs], vec!["x".into()]).is_err());
    }
}
