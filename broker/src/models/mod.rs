//! Models by Hugging Face name: identifiers, the hub cache people already have, and a client
//! that downloads into it (issue 26).

pub mod cache;
pub mod hub;
pub mod id;
