//! The helper's receipt for a host step.
