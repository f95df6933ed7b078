//! Steady-state cost of one procfs `snapshot()`: the real `/proc` of this host, and a fixture of
//! 1,000 fake processes. Each run warms the cache first, so only `stat` files are read.

use std::path::Path;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use kepler_core::{NoWorkloads, UsageSource};
use kepler_sources::ProcfsSource;

#[path = "../tests/common/mod.rs"]
mod common;

fn warm_source(root: &Path) -> ProcfsSource {
    let mut source = ProcfsSource::new(root.to_path_buf(), Arc::new(NoWorkloads))
        .unwrap_or_else(|e| panic!("procfs at {}: {e}", root.display()));
    for _ in 0..3 {
        source.snapshot().unwrap_or_else(|e| panic!("warm-up: {e}"));
    }
    source
}

fn bench(c: &mut Criterion) {
    let mut real = warm_source(Path::new("/proc"));
    let count = real.snapshot().map(|s| s.processes.len()).unwrap_or(0);
    c.bench_function(&format!("snapshot real /proc ({count} processes)"), |b| {
        b.iter(|| real.snapshot())
    });

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    common::write_many(dir.path(), 1000);
    let mut fixture = warm_source(dir.path());
    c.bench_function("snapshot fixture (1000 processes)", |b| {
        b.iter(|| fixture.snapshot())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
