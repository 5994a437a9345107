//! enginekit's unprivileged broker, as a library so that tests and benchmarks reach every part.

pub mod app;
pub mod assess;
pub mod candidates;
pub mod cli;
pub mod dbus;
pub mod docker;
pub mod doctor;
pub mod documents;
pub mod elevate;
pub mod engine;
pub mod host_changes;
pub mod host_undo;
pub mod i18n;
pub mod ids;
pub mod installations;
pub mod journal;
pub mod logging;
pub mod models;
pub mod operations;
pub mod paths;
pub mod plan;
pub mod probe;
pub mod programs;
pub mod test_hooks;
