//! Setup and removal as persisted operations: reducer, store, recovery, and the runner that
//! performs the reducer's effects.

pub mod boundary;
pub(crate) mod machine;
pub mod record;
pub(crate) mod recovery;
pub mod reducer;
pub mod runner;
pub mod store;
