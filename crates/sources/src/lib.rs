//! kepler-sources
