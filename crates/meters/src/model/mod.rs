//! Estimation: power predicted by a trained model from the node's usage, for hosts without a
//! power meter. It is the automatic last resort of the meter chain, and its zones are
//! labelled estimated. Everything about it lives here:
//!
//! - [`open_model_meter`] (`open`): the `estimator` settings and the host's facts decide
//!   which model (built-in by machine spec, a file, a URL, a model server's choice) and which
//!   output type (dynamic power inside a VM);
//! - [`fetch`]: downloads, the on-disk cache, and the [`ModelRefresh`] task that keeps a
//!   download fresh under the agent's stop signal;
//! - [`ModelMeter`] (`meter`): predictions from the tick's node features, reloading a model
//!   file when it changes.

pub mod fetch;
mod meter;
mod open;
#[cfg(test)]
mod test_server;

pub use fetch::{FetchError, ModelRefresh, Remote};
pub use meter::{ModelFile, ModelMeter, OutputType};
pub use open::{
    machine_spec, open_model_meter, output_type, EstimatorSettings, ModelChoice, OutputChoice,
};
