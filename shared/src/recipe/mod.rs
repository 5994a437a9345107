//! The host-step recipe as signed data: a fixed vocabulary of typed actions.
