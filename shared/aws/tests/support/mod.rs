//! Shared set-up of the AWS tests: the emulators and resources from
//! `siesta_aws::testing`, fault injection, and a run waiting on a callback.

#![allow(dead_code, unreachable_pub)]

pub mod faults;
pub mod waiting;

pub use siesta_aws::testing::*;
