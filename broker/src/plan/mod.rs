//! The plan answered to the user, its digest, and the host step when root is needed.

pub mod digest;
