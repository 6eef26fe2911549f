//! Logging through the host: lines land in the host's tracing output and in
//! the run's events. The host rate-limits them per instance.

pub use crate::bindings::common::keel::plugin::types::Level;

/// Sends one log line to the host.
pub fn log(level: Level, message: &str) {
    crate::bindings::common::keel::plugin::log::log(level, message);
}

/// `keel_guest::info!("read {} bytes", n)`; likewise `trace!`, `debug!`,
/// `warn!`, `error!`.
#[macro_export]
macro_rules! info {
    ($($t:tt)*) => { $crate::log::log($crate::log::Level::Info, &format!($($t)*)) };
}
#[macro_export]
macro_rules! debug {
    ($($t:tt)*) => { $crate::log::log($crate::log::Level::Debug, &format!($($t)*)) };
}
#[macro_export]
macro_rules! trace {
    ($($t:tt)*) => { $crate::log::log($crate::log::Level::Trace, &format!($($t)*)) };
}
#[macro_export]
macro_rules! warn {
    ($($t:tt)*) => { $crate::log::log($crate::log::Level::Warn, &format!($($t)*)) };
}
#[macro_export]
macro_rules! error {
    ($($t:tt)*) => { $crate::log::log($crate::log::Level::Error, &format!($($t)*)) };
}
