//! kepler-ebpf
