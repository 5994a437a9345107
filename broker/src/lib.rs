//! enginekit's unprivileged broker, as a library so that tests and benchmarks reach every part.

mod app;
mod assess;
pub mod candidates;
pub mod cli;
pub mod dbus;
pub mod docker;
mod doctor;
pub mod documents;
pub mod elevate;
pub mod engine;
mod host_changes;
mod host_undo;
mod i18n;
pub mod ids;
mod installations;
pub mod journal;
mod kept;
mod logging;
pub mod models;
pub mod operations;
mod paths;
pub mod plan;
pub mod probe;
pub mod programs;
mod test_hooks;
