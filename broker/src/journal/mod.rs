//! The container journal and reconcile: every container the broker starts is recorded first.
