//! safe
