//! The engine runtime: from a set-up machine to an OpenAI-compatible endpoint on 127.0.0.1.
//!
//! One job per module; everything but `runtime` is pure or touches only files it is handed:
//!
//! - `options`: the load's options, checked before any Docker call (stable codes);
//! - `argv`: the launch (argv and environment) of vLLM and TensorRT-LLM;
//! - `gpu`: which card a load runs on, or which cards for a tensor-parallel group;
//! - `claim`: one session per card, a group's cards claimed all or none;
//! - `sizing`: whether the model fits a card's free memory, before any Docker call;
//! - `stages`: load stages from the engine's log markers;
//! - `classify`: why an engine exited before it became ready, from its bounded log;
//! - `health`: the readiness probe (`GET /health`, never following a redirect);
//! - `watchdog`: the PID-1 script that stops the engine when the heartbeat goes stale;
//! - `heartbeat`: the broker's side of it, a thread rewriting the heartbeat file;
//! - `served`: what the container mounts of the model (a folder, or a hub snapshot's model folder);
//! - `sessions`: session records on disk, which are also the GPU reservations;
//! - `runtime`: load, crash monitor, confirmed stop, listing and logs over the Docker layer; its
//!   `load` is typed stages (sized → model present → GPU claimed → launched → ready).

pub(crate) mod argv;
pub(crate) mod claim;
pub(crate) mod classify;
pub(crate) mod error;
pub(crate) mod gpu;
pub(crate) mod health;
pub(crate) mod heartbeat;
pub(crate) mod options;
pub(crate) mod runtime;
pub(crate) mod served;
pub(crate) mod sessions;
pub(crate) mod sizing;
pub(crate) mod stages;
pub mod watchdog;

pub(crate) use error::EngineError;
