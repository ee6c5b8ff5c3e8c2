//! Support for the console tests.
#![allow(dead_code)]

pub mod cdp;
pub mod harness;
