//! `/org/enginekit/Helper1`, interface `org.enginekit.Helper1`: `Start` and `GetReceipt`.
//!
//! `Start` runs the chain, in this order, on the exact bytes received, and refuses at the first
//! failure without writing anything:
//! 1. size limit; 2. strict parse (duplicate keys, unknown fields refused);
//! 3. the caller's unique name and uid from the bus daemon;
//! 4. polkit for the caller's bus name, with the step's recipe id, digests and summary;
//! 5. the recipe (built in, or inline and signed by a pinned key), its digest, its serial;
//! 6. the parameters (validated, digest recomputed); `user` is the caller; the machine facts;
//! 7. `issued_at` within the window; 8. the job slot (one job at a time);
//! 9. the nonce burnt durably (a replay by the same step gets the first receipt);
//! 10. the caller still on the bus; then the job starts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use zbus::message::{Flags, Header};
use zbus::object_server::ObjectServer;
use zbus::Connection;
use zbus::OwnedObjectPath;

use super::activity::Activity;
use super::caller::Caller;
use super::error::{interaction_required, refuse, HelperError};
use super::job::{Job, JobShared, JobState, JobStatus, JOB_PATH_PREFIX};
use super::run_job;
use crate::authz::{self, Decision};
use crate::config::Config;
use crate::ledger::{Burn, Ledger};
use crate::runner::CancelToken;
use crate::verify::{self, Checks, MachineFacts, ReceivedStep};

/// The helper object.
#[derive(Debug)]
pub struct Helper {
    pub config: Arc<Config>,
    pub ledger: Arc<Ledger>,
    pub activity: Arc<Activity>,
    next_job: AtomicU64,
}

impl Helper {
    pub fn new(config: Arc<Config>, ledger: Arc<Ledger>, activity: Arc<Activity>) -> Helper {
        Helper {
            config,
            ledger,
            activity,
            next_job: AtomicU64::new(1),
        }
    }

    async fn start_chain(
        &self,
        bytes: &[u8],
        header: &Header<'_>,
        conn: &Connection,
        server: &ObjectServer,
        log: &mut DecisionLog,
    ) -> Result<OwnedObjectPath, HelperError> {
        // 1-2: size and strict parse, before anything else is looked at.
        let received = verify::receive(bytes)?;
        log.received(&received);
        // 3: who is calling, from the bus daemon.
        let caller = Caller::identify(conn, header).await?;
        log.uid = Some(caller.uid);
        // Asking for a password for a step that cannot run now would only annoy the user.
        if let Some(running) = self.activity.running_job() {
            return Err(refuse!(Busy, "another job is running (nonce {running})"));
        }
        // 4: polkit.
        let details = received.polkit_details();
        let question = authz::Question {
            header,
            details: details.iter().map(|(k, v)| (*k, v.as_str())).collect(),
            interactive: header
                .primary()
                .flags()
                .contains(Flags::ALLOW_INTERACTIVE_AUTH),
            timeout: self.config.polkit_timeout,
        };
        let decision = authz::check(conn, &question).await;
        log.authz = Some(decision.as_str());
        match decision {
            Decision::Authorized => {}
            Decision::InteractionRequired => return Err(interaction_required()),
            Decision::Dismissed => {
                return Err(refuse!(
                    NotAuthorizedDismissed,
                    "the authentication dialog was dismissed"
                ))
            }
            Decision::NotAuthorized => {
                return Err(refuse!(
                    NotAuthorized,
                    "polkit denied {} to uid {}",
                    authz::ACTION_ID,
                    caller.uid
                ))
            }
            Decision::CallerLeft => {
                return Err(refuse!(
                    NotAuthorized,
                    "the caller left the bus before authorisation finished"
                ))
            }
            Decision::TimedOut => {
                return Err(refuse!(
                    NotAuthorized,
                    "polkit did not answer within {:?}",
                    self.config.polkit_timeout
                ))
            }
            Decision::Unavailable(why) => {
                return Err(refuse!(NotAuthorized, "polkit could not be asked: {why}"))
            }
        }
        // 5-7: the content.
        let machine = MachineFacts::read()
            .map_err(|e| refuse!(Internal, "cannot read this machine's facts: {e}"))?;
        let user_name = caller.user_name()?;
        let trust = enginekit_shared::signed::TrustStore::load_root_owned(&self.config.key_dirs);
        for rejected in trust.rejected() {
            tracing::warn!(path = %rejected.path.display(), reason = %rejected.reason, "key file ignored");
        }
        let checks = Checks {
            trust: &trust,
            ledger: &self.ledger,
            machine: &machine,
            caller_name: &user_name,
            now: time::OffsetDateTime::now_utc(),
            window: self.config.step_window,
            skew: self.config.clock_skew,
        };
        let authorised = verify::check_content(received, &checks)?;
        // 8: the job slot.
        let nonce = authorised.nonce().to_owned();
        let Some(slot) = self.activity.reserve_job(&nonce) else {
            return Err(refuse!(Busy, "another job is running"));
        };
        // 9: the nonce.
        let burn = self
            .ledger
            .burn(
                &nonce,
                authorised.step_digest(),
                caller.uid,
                authorised.issued_at_unix(),
            )
            .map_err(|e| refuse!(Internal, "{e}"))?;
        let path = self.job_path();
        match burn {
            Burn::Fresh => {}
            Burn::Conflict => {
                return Err(refuse!(ReceiptConflict, "nonce {nonce} was already used by a different step"))
            }
            Burn::Replay { receipt: None } => {
                return Err(refuse!(
                    ReceiptMissing,
                    "nonce {nonce} was already used by this step, whose job left no receipt; probe the machine and issue a new step"
                ))
            }
            Burn::Replay { receipt: Some(receipt) } => {
                log.replay = true;
                let state = verify::receipt_outcome(&receipt)
                    .map(|o| JobState::from_outcome(&o))
                    .unwrap_or(JobState::Failed);
                let shared = Arc::new(JobShared::new(
                    caller.uid,
                    nonce,
                    CancelToken::new(),
                    JobStatus {
                        state,
                        phase: "finished earlier".to_owned(),
                        percent: 100,
                        allow_cancel: false,
                        receipt,
                    },
                ));
                server
                    .at(path.clone(), Job { shared })
                    .await
                    .map_err(|e| refuse!(Internal, "cannot export the job: {e}"))?;
                return Ok(path);
            }
        }
        if let Some(mark) = authorised.high_water() {
            self.ledger
                .raise_high_water(authorised.recipe_id(), &mark)
                .map_err(|e| refuse!(Internal, "{e}"))?;
        }
        // 10: the caller must still be there for the job to start.
        let bus = zbus::fdo::DBusProxy::new(conn)
            .await
            .map_err(|e| refuse!(Internal, "{e}"))?;
        if !authz::caller_present(&bus, &caller.unique_name.as_ref()).await {
            let receipt = crate::receipt::not_run(
                &authorised,
                enginekit_shared::wire::receipt::Outcome::Cancelled,
                enginekit_shared::error::ErrorCode::ElevationDeclined,
                "the caller left the bus before the job started",
            );
            let _ = self.ledger.store_receipt(
                &nonce,
                caller.uid,
                authorised.issued_at_unix(),
                &receipt,
            );
            return Err(refuse!(
                NotAuthorized,
                "the caller left the bus before the job started"
            ));
        }
        let cancel = CancelToken::new();
        let shared = Arc::new(JobShared::new(
            caller.uid,
            nonce,
            cancel,
            JobStatus {
                state: JobState::Running,
                phase: "starting".to_owned(),
                percent: -1,
                allow_cancel: true,
                receipt: String::new(),
            },
        ));
        server
            .at(
                path.clone(),
                Job {
                    shared: Arc::clone(&shared),
                },
            )
            .await
            .map_err(|e| refuse!(Internal, "cannot export the job: {e}"))?;
        let job_conn = conn.clone();
        let ledger = Arc::clone(&self.ledger);
        let job_path = path.clone();
        tokio::spawn(async move {
            run_job(job_conn, job_path, shared, authorised, ledger, slot).await;
        });
        Ok(path)
    }

    fn job_path(&self) -> OwnedObjectPath {
        let n = self.next_job.fetch_add(1, Ordering::Relaxed);
        // The prefix is a valid path and N is decimal, so this cannot fail.
        OwnedObjectPath::try_from(format!("{JOB_PATH_PREFIX}{n}")).unwrap_or_else(|_| {
            OwnedObjectPath::from(zbus::ObjectPath::from_static_str_unchecked(
                "/org/enginekit/Helper1/job/0",
            ))
        })
    }
}

#[zbus::interface(name = "org.enginekit.Helper1")]
impl Helper {
    /// Verifies and authorises one host step, then starts its job.
    #[zbus(out_args("job"))]
    async fn start(
        &self,
        step: &str,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<OwnedObjectPath, HelperError> {
        let _call = self.activity.call_started();
        let mut log = DecisionLog::default();
        let result = self
            .start_chain(step.as_bytes(), &header, conn, server, &mut log)
            .await;
        log.emit(header.sender().map(|s| s.as_str()).unwrap_or("?"), &result);
        result
    }

    /// The receipt of the job `nonce` started, for the same uid only.
    #[zbus(out_args("receipt"))]
    async fn get_receipt(
        &self,
        nonce: &str,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, HelperError> {
        let _call = self.activity.call_started();
        let caller = Caller::identify(conn, &header).await?;
        let parsed: enginekit_shared::nonce::Nonce = nonce
            .parse()
            .map_err(|_| refuse!(InvalidArgument, "a nonce is 32 lowercase hex digits"))?;
        let found = self
            .ledger
            .receipt_for(parsed.as_str(), caller.uid)
            .map_err(|e| refuse!(Internal, "{e}"))?;
        tracing::info!(
            uid = caller.uid,
            action = "get-receipt",
            nonce = parsed.as_str(),
            outcome = if found.is_some() { "found" } else { "none" },
            "receipt lookup"
        );
        found.ok_or_else(|| {
            refuse!(
                NoReceipt,
                "no receipt of yours for nonce {}",
                parsed.as_str()
            )
        })
    }
}

/// Collects what one `Start` decided, for a single journal entry.
#[derive(Debug, Default)]
struct DecisionLog {
    uid: Option<u32>,
    nonce: Option<String>,
    recipe_id: Option<String>,
    recipe_digest: Option<String>,
    parameters_digest: Option<String>,
    authz: Option<&'static str>,
    replay: bool,
}

impl DecisionLog {
    fn received(&mut self, step: &ReceivedStep) {
        self.nonce = Some(step.nonce().to_owned());
        self.recipe_id = Some(step.recipe_id().to_owned());
        self.recipe_digest = Some(step.recipe_digest().to_owned());
        self.parameters_digest = Some(step.parameters_digest().to_owned());
    }

    fn emit(&self, sender: &str, result: &Result<OwnedObjectPath, HelperError>) {
        let uid = self.uid.map(i64::from).unwrap_or(-1);
        let nonce = self.nonce.as_deref().unwrap_or("");
        let recipe_id = self.recipe_id.as_deref().unwrap_or("");
        let recipe_digest = self.recipe_digest.as_deref().unwrap_or("");
        let parameters_digest = self.parameters_digest.as_deref().unwrap_or("");
        let authz = self.authz.unwrap_or("not-asked");
        match result {
            Ok(job) => tracing::info!(
                sender,
                uid,
                action = authz::ACTION_ID,
                nonce,
                recipe_id,
                recipe_digest,
                parameters_digest,
                authz,
                outcome = if self.replay { "replayed" } else { "started" },
                job = job.as_str(),
                "step accepted"
            ),
            Err(e) => tracing::warn!(
                sender, uid, action = authz::ACTION_ID, nonce, recipe_id, recipe_digest,
                parameters_digest, authz, outcome = e.kind(), error = %zbus::DBusError::description(e).unwrap_or(""),
                "step refused"
            ),
        }
    }
}
