//! Shared harness for the integration tests: bringing the test bench up, checking that the
//! services a test needs really answer, and small helpers (binaries, users, polkit rules).
//!
//! Every test that needs a service starts with
//! `let env = enginekit_integration::bench::require(&[Service::Docker, ...]);`.
//! A service that does not answer is a test failure (a panic naming the service and its log),
//! never a skip.

pub mod bench;
pub mod dockerd;
pub mod documents;
pub mod interface_xml;
pub mod output;
pub mod packages;
pub mod session_host;
pub mod simulated_rhel;
pub mod standin_hub;
pub mod systemd;
pub mod user_podman;
