//! Shared set-up of the AWS tests: the emulators and resources from
//! `siesta_aws::testing`, and fault injection.

#![allow(dead_code, unreachable_pub)]

pub mod faults;

pub use siesta_aws::testing::*;
