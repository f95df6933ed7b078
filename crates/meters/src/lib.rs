//! kepler-meters
