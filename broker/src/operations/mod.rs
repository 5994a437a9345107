//! Setup and removal as persisted operations: reducer, store, recovery.
