//! kepler-models
