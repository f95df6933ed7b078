//! `docs/metrics.md` is generated from the descriptors and must not drift from them.

use std::path::PathBuf;

#[test]
fn docs_metrics_md_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md");
    let expected = kepler_exporters::metrics_markdown();
    if std::env::var("UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, &expected).expect("writing docs/metrics.md");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == expected,
        "{} is out of date with the metric descriptors: run `UPDATE_DOCS=1 cargo test -p kepler-exporters` to regenerate",
        path.display()
    );
}
