//! Shared harness for the integration tests: locating the bench and its services.
