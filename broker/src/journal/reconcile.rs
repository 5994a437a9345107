//! Startup reconcile: containers recorded by broker instances that are gone (their instance
//! lock is free) are stopped, removed and unjournalled. Records of live instances, including
//! our own, are never touched; a container whose identity does not match its record is never
//! touched; containers that carry our labels but have no record are reported, not removed.
//! Every Docker call and the whole pass are bounded, so a hung daemon cannot hold startup.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::lifecycle::identity_mismatch;
use super::lock::{InstanceLock, Probe};
use super::record::{ContainerRecord, InstanceId};
use super::{Journal, JournalError, UnreadableRecord};
use crate::docker::{Docker, StopOutcome};

/// Bounds of one pass.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileLimits {
    /// Deadline of each inspect/remove.
    pub per_call: Duration,
    /// Stop grace (SIGTERM → SIGKILL).
    pub stop_grace: Duration,
    /// The whole pass; records not started by then are `skipped`.
    pub total: Duration,
    /// At most this many records are worked on; the rest are `skipped`.
    pub max_records: usize,
}

impl Default for ReconcileLimits {
    fn default() -> Self {
        ReconcileLimits {
            per_call: Duration::from_secs(10),
            stop_grace: Duration::from_secs(5),
            total: Duration::from_secs(20),
            max_records: 64,
        }
    }
}

/// One record and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReconciledRecord {
    pub name: String,
    pub(crate) container_id: Option<String>,
    pub instance: String,
    pub(crate) engine: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ReconciledRecord {
    fn of(record: &ContainerRecord, reason: Option<String>) -> Self {
        ReconciledRecord {
            name: record.name.to_string(),
            container_id: record.container_id.clone(),
            instance: record.instance.to_string(),
            engine: record.engine.clone(),
            reason,
        }
    }
}

/// A container with our owner label that no record names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnrecordedContainer {
    pub id: String,
    pub(crate) name: String,
    pub(crate) image: String,
    pub instance_label: Option<String>,
}

/// The outcome of a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReconcileReport {
    /// Stopped (confirmed), removed and unjournalled.
    pub stopped: Vec<ReconciledRecord>,
    /// Already gone: the record was dropped.
    pub absent: Vec<ReconciledRecord>,
    /// The stop could not be confirmed: container and record kept.
    pub unconfirmed: Vec<ReconciledRecord>,
    /// Something failed (including an identity mismatch): container and record kept.
    pub failed: Vec<ReconciledRecord>,
    /// Not worked on: its broker is alive, or the pass ran out of budget.
    pub skipped: Vec<ReconciledRecord>,
    /// Labelled containers without a record (reported only).
    pub unrecorded: Vec<UnrecordedContainer>,
    /// Journal files that could not be read (kept on disk).
    pub(crate) unreadable: Vec<UnreadableRecord>,
    /// Why the labelled-container discovery failed, if it did.
    pub(crate) discovery_error: Option<String>,
}

enum Outcome {
    Stopped,
    Absent,
    Unconfirmed(String),
    Failed(String),
}

/// Reconciles the records of dead instances. Our own records are left alone.
pub async fn reconcile(
    docker: &Docker,
    journal: &Journal,
    limits: ReconcileLimits,
) -> Result<ReconcileReport, JournalError> {
    let started = Instant::now();
    let docker = docker.with_call_timeout(limits.per_call);
    // Only this runtime's records: another runtime's containers are not judged through it. A
    // daemon that does not answer is taken for Docker's, whose records then fail as before.
    let runtime = docker.runtime().await.unwrap_or_default();
    let listing = journal.list()?;
    let mut report = ReconcileReport {
        unreadable: listing.unreadable.clone(),
        ..ReconcileReport::default()
    };

    let mut by_instance: BTreeMap<InstanceId, Vec<ContainerRecord>> = BTreeMap::new();
    for record in listing.records.iter().filter(|r| r.runtime == runtime) {
        if &record.instance != journal.instance() {
            by_instance
                .entry(record.instance.clone())
                .or_default()
                .push(record.clone());
        }
    }

    let locks = journal.locks_dir();
    let mut worked = 0usize;
    let per_record = limits.per_call * 3 + limits.stop_grace + Duration::from_secs(5);
    for (instance, records) in by_instance {
        let lock = match InstanceLock::probe(&locks, &instance) {
            Ok(Probe::Dead(lock)) => lock,
            Ok(Probe::Alive) => {
                for r in &records {
                    report.skipped.push(ReconciledRecord::of(
                        r,
                        Some("its broker instance is running".into()),
                    ));
                }
                continue;
            }
            Err(err) => {
                for r in &records {
                    report.failed.push(ReconciledRecord::of(
                        r,
                        Some(format!("the instance lock could not be probed: {err}")),
                    ));
                }
                continue;
            }
        };
        let mut left = 0usize;
        for record in &records {
            if started.elapsed() >= limits.total || worked >= limits.max_records {
                report.skipped.push(ReconciledRecord::of(
                    record,
                    Some("the reconcile budget was spent".into()),
                ));
                left += 1;
                continue;
            }
            worked += 1;
            let outcome =
                match tokio::time::timeout(per_record, one(&docker, journal, record, limits)).await
                {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        Outcome::Failed(format!("did not finish within {} s", per_record.as_secs()))
                    }
                };
            match outcome {
                Outcome::Stopped => report.stopped.push(ReconciledRecord::of(record, None)),
                Outcome::Absent => report.absent.push(ReconciledRecord::of(record, None)),
                Outcome::Unconfirmed(reason) => {
                    left += 1;
                    report
                        .unconfirmed
                        .push(ReconciledRecord::of(record, Some(reason)))
                }
                Outcome::Failed(reason) => {
                    left += 1;
                    report
                        .failed
                        .push(ReconciledRecord::of(record, Some(reason)))
                }
            }
        }
        if left == 0 {
            // Nothing of that instance is left: its lock file can go.
            let _ = lock.retire();
        }
    }

    discover_unrecorded(&docker, &listing.records, &mut report).await;
    Ok(report)
}

async fn one(
    docker: &Docker,
    journal: &Journal,
    record: &ContainerRecord,
    limits: ReconcileLimits,
) -> Outcome {
    let key = record
        .container_id
        .clone()
        .unwrap_or_else(|| record.name.to_string());
    let facts = match docker.inspect_container(&key).await {
        Ok(Some(facts)) => facts,
        Ok(None) => {
            return match journal.remove(&record.name) {
                Ok(()) => Outcome::Absent,
                Err(err) => Outcome::Failed(err.to_string()),
            }
        }
        Err(err) => return Outcome::Failed(err.to_string()),
    };
    if let Some(reason) = identity_mismatch(record, &facts) {
        return Outcome::Failed(format!("identity mismatch, left untouched: {reason}"));
    }
    match docker.stop_container(&facts.id, limits.stop_grace).await {
        StopOutcome::Unconfirmed { reason } => return Outcome::Unconfirmed(reason),
        StopOutcome::Absent => {
            return match journal.remove(&record.name) {
                Ok(()) => Outcome::Absent,
                Err(err) => Outcome::Failed(err.to_string()),
            }
        }
        StopOutcome::Exited { .. } => {}
    }
    if let Err(err) = docker.remove_container(&facts.id).await {
        return Outcome::Failed(format!("stopped but not removed: {err}"));
    }
    match journal.remove(&record.name) {
        Ok(()) => Outcome::Stopped,
        Err(err) => Outcome::Failed(format!("removed but the record stayed: {err}")),
    }
}

async fn discover_unrecorded(
    docker: &Docker,
    records: &[ContainerRecord],
    report: &mut ReconcileReport,
) {
    let known_ids: HashSet<&str> = records
        .iter()
        .filter_map(|r| r.container_id.as_deref())
        .collect();
    let known_names: HashSet<&str> = records.iter().map(|r| r.name.as_str()).collect();
    match docker.labelled_containers().await {
        Ok(containers) => {
            for c in containers {
                if known_ids.contains(c.id.as_str()) || known_names.contains(c.name.as_str()) {
                    continue;
                }
                report.unrecorded.push(UnrecordedContainer {
                    instance_label: c.labels.get(crate::docker::spec::LABEL_INSTANCE).cloned(),
                    id: c.id,
                    name: c.name,
                    image: c.image_ref,
                });
            }
        }
        Err(err) => report.discovery_error = Some(err.to_string()),
    }
}
