//! Wire types exchanged between the broker, the helper and the broker's clients.

pub mod host_step;
pub mod plan;
pub mod receipt;
