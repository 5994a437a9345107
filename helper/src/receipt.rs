//! The receipt of a job.
use std::time::SystemTime;
use crate::runner::ExecutionReport;
use crate::verify::AuthorisedStep;
pub fn build(_step: &AuthorisedStep, _started: SystemTime, _finished: SystemTime, _report: &ExecutionReport) -> String { String::new() }
