//! Claiming the cards of a load: one card, or every card of a tensor-parallel group.
//!
//! A card holds one session, and a load first stops (confirmed) whatever holds a card it needs.
//! The claim is all or none: the load's record names all its cards and is written only once
//! every holder of any of them has been stopped, under the claim lock; if one cannot be stopped,
//! nothing is written and the load fails with GPU_BUSY. As one record holds the whole group,
//! removing it (a confirmed stop, the crash monitor, the reconcile after the watchdog ended the
//! engine) releases every card at once.

use std::future::Future;

use super::error::{EngineError, Result};
use super::sessions::{SessionRecord, SessionState, Sessions};

/// How a holder is stopped: the runtime's confirmed stop (which removes its record).
pub(crate) trait Evict {
    fn evict(&self, holder: &SessionRecord) -> impl Future<Output = Result<()>> + Send;
}

/// Stops every other session holding a card of `record`, then writes `record`; `on_evicted`
/// hears each holder stopped. GPU_BUSY, with nothing written, when a holder cannot be stopped.
pub(crate) async fn claim(
    sessions: &Sessions,
    record: &SessionRecord,
    evictor: &impl Evict,
    on_evicted: &mut (dyn FnMut(&str) + Send),
) -> Result<()> {
    let _lock = sessions.lock()?;
    let wanted: Vec<&str> = record.gpus().collect();
    let mut holders: Vec<SessionRecord> = sessions
        .list()
        .into_iter()
        .filter(|s| s.name != record.name && s.gpus().any(|g| wanted.contains(&g)))
        .collect();
    // A holder whose last stop was not confirmed is the likeliest to fail again: tried first,
    // so that no other holder is stopped for a load that cannot have its cards.
    holders.sort_by_key(|h| h.state != SessionState::StopUnconfirmed);
    for holder in &holders {
        if let Err(e) = evictor.evict(holder).await {
            let gpu = holder
                .gpus()
                .find(|g| wanted.contains(g))
                .unwrap_or(&holder.gpu)
                .to_owned();
            // Why the stop failed: Docker's own words, which the stop's message leaves out.
            let reason = match &e {
                EngineError::StopUnconfirmed { reason, .. } => format!("{e} ({reason})"),
                _ => e.to_string(),
            };
            return Err(EngineError::GpuBusy {
                holder: holder.name.clone(),
                gpu,
                reason,
            });
        }
        on_evicted(&holder.name);
    }
    sessions.put(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::sessions::Owner;
    use enginekit_shared::error::ErrorCode;
    use std::sync::Mutex;

    const G1: &str = "GPU-11111111-0000-0000-0000-000000000000";
    const G2: &str = "GPU-22222222-0000-0000-0000-000000000000";
    const G3: &str = "GPU-33333333-0000-0000-0000-000000000000";

    fn record(name: &str, gpus: &[&str]) -> SessionRecord {
        SessionRecord {
            name: name.into(),
            engine: "vllm".into(),
            descriptor_id: "d".into(),
            image: "r@sha256:x".into(),
            gpu: gpus[0].into(),
            more_gpus: gpus[1..].iter().map(|g| (*g).to_owned()).collect(),
            container_name: format!("enginekit-{name}"),
            container_id: None,
            host_port: None,
            base_url: None,
            model_dir: "/m".into(),
            model_repo: None,
            model_commit: None,
            context: 8192,
            heartbeat_dir: "/h".into(),
            owner: Owner::Cli,
            owner_pid: std::process::id(),
            state: SessionState::Ready,
            created_at: "2026-12-05T00:00:00Z".into(),
            runtime: Default::default(),
        }
    }

    /// Stops by removing the record, as the confirmed stop does, except for `refuse`, whose
    /// stop Docker does not confirm; records who was asked.
    struct Fake<'a> {
        sessions: &'a Sessions,
        refuse: &'a [&'a str],
        asked: Mutex<Vec<String>>,
    }

    impl Evict for Fake<'_> {
        async fn evict(&self, holder: &SessionRecord) -> Result<()> {
            if let Ok(mut asked) = self.asked.lock() {
                asked.push(holder.name.clone());
            }
            if self.refuse.contains(&holder.name.as_str()) {
                return Err(EngineError::StopUnconfirmed {
                    container: holder.container_name.clone(),
                    reason: "docker stop timed out".into(),
                });
            }
            self.sessions.remove(&holder.name)
        }
    }

    fn names(sessions: &Sessions) -> Vec<String> {
        sessions.list().into_iter().map(|s| s.name).collect()
    }

    #[tokio::test]
    async fn a_group_is_claimed_whole_and_its_holders_are_stopped_first() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::open(dir.path()).unwrap();
        sessions.put(&record("on-1", &[G1])).unwrap();
        sessions.put(&record("on-3", &[G3])).unwrap();
        let fake = Fake {
            sessions: &sessions,
            refuse: &[],
            asked: Mutex::new(Vec::new()),
        };
        let mut evicted = Vec::new();
        let big = record("big", &[G1, G2]);
        claim(&sessions, &big, &fake, &mut |n| evicted.push(n.to_owned()))
            .await
            .unwrap();
        assert_eq!(evicted, ["on-1"]);
        assert_eq!(names(&sessions), ["big", "on-3"]);
        assert_eq!(
            sessions.get("big").unwrap().gpus().collect::<Vec<_>>(),
            [G1, G2]
        );

        // A later load wanting one card of the group stops the whole group, and then every
        // card of it is free again: G1 is not left held by a half-released group.
        let mut evicted = Vec::new();
        claim(&sessions, &record("small", &[G2]), &fake, &mut |n| {
            evicted.push(n.to_owned())
        })
        .await
        .unwrap();
        assert_eq!(evicted, ["big"]);
        assert_eq!(names(&sessions), ["on-3", "small"]);
        assert!(sessions.list().iter().all(|s| !s.gpus().any(|g| g == G1)));
    }

    #[tokio::test]
    async fn a_card_that_cannot_be_freed_is_gpu_busy_and_no_card_is_reserved() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::open(dir.path()).unwrap();
        sessions.put(&record("on-1", &[G1])).unwrap();
        let mut stuck = record("stuck", &[G2]);
        stuck.state = SessionState::StopUnconfirmed;
        sessions.put(&stuck).unwrap();
        let fake = Fake {
            sessions: &sessions,
            refuse: &["stuck"],
            asked: Mutex::new(Vec::new()),
        };
        let mut evicted = Vec::new();
        let err = claim(&sessions, &record("big", &[G1, G2]), &fake, &mut |n| {
            evicted.push(n.to_owned())
        })
        .await
        .unwrap_err();
        assert_eq!(err.code(), ErrorCode::GpuBusy);
        assert!(matches!(
            &err,
            EngineError::GpuBusy { holder, gpu, .. } if holder == "stuck" && gpu == G2
        ));
        assert!(err
            .to_coded()
            .details
            .unwrap()
            .contains("docker stop timed out"));
        // None of the group was reserved, and the holder of the other card was not stopped
        // for nothing: the one that could not be stopped was tried first.
        assert!(sessions.get("big").is_none());
        assert!(evicted.is_empty());
        assert_eq!(*fake.asked.lock().unwrap(), ["stuck"]);
        assert_eq!(names(&sessions), ["on-1", "stuck"]);
    }

    #[tokio::test]
    async fn a_load_never_evicts_itself_nor_sessions_on_other_cards() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::open(dir.path()).unwrap();
        sessions.put(&record("other", &[G3])).unwrap();
        let fake = Fake {
            sessions: &sessions,
            refuse: &[],
            asked: Mutex::new(Vec::new()),
        };
        let me = record("me", &[G1, G2]);
        sessions.put(&me).unwrap();
        claim(&sessions, &me, &fake, &mut |_| {}).await.unwrap();
        assert!(fake.asked.lock().unwrap().is_empty());
        assert_eq!(names(&sessions), ["me", "other"]);
    }
}
