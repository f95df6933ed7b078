//! Regression fitting for training models: the few statistics the built-in models are
//! trained with (`kepler-model-server train-builtin`), in the library so that the trainer,
//! the evaluation and tests share one implementation.
//!
//! All deterministic: no randomness, fixed iteration counts, total ordering of floats, and
//! rounding by exact decimal formatting, so the same data gives the same bytes everywhere.

mod log_curve;
mod stats;

pub use log_curve::{fit_log_b, fit_log_curve, log_shape};
pub use stats::{mdape, median, round_digits, theil_sen};
