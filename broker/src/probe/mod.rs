//! Read-only host facts: distribution, Docker, NVIDIA driver and GPUs, toolkit, disk, SELinux, networks.

pub mod facts;

pub use facts::{Fact, HostFacts};
