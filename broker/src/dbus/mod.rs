//! The session-bus service org.enginekit.Broker1.
