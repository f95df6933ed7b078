//! kepler-workloads
