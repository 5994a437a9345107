//! Host step and its parameters.
