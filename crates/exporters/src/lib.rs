//! kepler-exporters
