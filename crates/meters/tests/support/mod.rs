//! Helpers shared by the meters' integration tests. Each test binary uses only some of
//! them, hence the allowance.
#![allow(dead_code)]

pub mod bmc;
pub mod logs;
