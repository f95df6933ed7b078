//! Encoding cost of a busy node: 1,250 processes × 4 zones × 2 families (joules, watts) plus
//! their cpu-seconds = 11,250 process series (and the node families), in text 0.0.4 — the
//! DESIGN target is ≤ 10 ms for ~10,000 series. A second case adds the container and pod
//! levels (one container and pod per four processes), and a third measures OpenMetrics.
//!
//! Run: `cargo bench -p kepler-exporters --bench encode`

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kepler_exporters::{encode, Format, Level, MetricsLevel};

fn bench(c: &mut Criterion) {
    let snapshot = support::synthetic(1250, 4);
    let mut group = c.benchmark_group("encode");

    let cases = [
        (
            "text_node_process",
            MetricsLevel::NONE.with(Level::Node).with(Level::Process),
            Format::Text004,
        ),
        ("text_all_levels", MetricsLevel::ALL, Format::Text004),
        (
            "openmetrics_all_levels",
            MetricsLevel::ALL,
            Format::OpenMetrics,
        ),
    ];
    for (name, levels, format) in cases {
        let mut ctx = support::context();
        ctx.levels = levels;
        let mut out = Vec::new();
        encode(Some(&snapshot), &ctx, format, &mut out);
        let text = String::from_utf8(out.clone()).expect("utf-8");
        let series = support::series(&text);
        eprintln!("{name}: {series} series, {} bytes", out.len());
        group.throughput(Throughput::Elements(series as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                // As the server does: a reused, cleared buffer.
                out.clear();
                encode(Some(black_box(&snapshot)), &ctx, format, &mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
