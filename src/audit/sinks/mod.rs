//! The built-in sinks.

pub mod console;
pub mod file;
#[cfg(feature = "http")]
pub mod http;
pub mod memory;
