//! Helpers shared by the meters' integration tests.

pub mod bmc;
pub mod logs;
