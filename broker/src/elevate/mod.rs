//! The root helper's client on the system bus: `Start` with interactive authorisation allowed,
//! the job followed through its signals, `GetReceipt` after a crash. Also starts a text polkit
//! agent when the session has none and a terminal is there to ask on.

pub(crate) mod agent;
mod cause;
mod lock_holder;

use std::time::Duration;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::receipt::{ActionStatus, Outcome, Receipt};
use futures_util::StreamExt;
use tokio::sync::OnceCell;
use zbus::proxy::CacheProperties;
use zbus::Connection;
use zbus::OwnedObjectPath;

use crate::operations::boundary::{
    Elevator, HostRun, JobNote, ProgressSink, ProgressTick, ReceiptLookup, ReceiptSummary,
};
use crate::operations::reducer::HostOutcome;
use enginekit_shared::wire::host_step::HostStep;
use enginekit_shared::wire::refusal::RefusalKind;
use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep};

pub(crate) const HELPER_NAME: &str = "org.enginekit.Helper1";

#[zbus::proxy(
    interface = "org.enginekit.Helper1",
    default_service = "org.enginekit.Helper1",
    default_path = "/org/enginekit/Helper1"
)]
pub(crate) trait Helper1 {
    #[zbus(allow_interactive_auth)]
    fn start(&self, step: &str) -> zbus::Result<OwnedObjectPath>;
    fn get_receipt(&self, nonce: &str) -> zbus::Result<String>;
    fn setups(&self) -> zbus::Result<Vec<String>>;
    /// Undo the setups an undo step names; the same job object, progress and `Finished` as
    /// `Start`'s, the receipt's nonce the step's.
    #[zbus(allow_interactive_auth)]
    fn undo(&self, step: &str) -> zbus::Result<OwnedObjectPath>;
}

#[zbus::proxy(
    interface = "org.enginekit.Helper1.Job",
    default_service = "org.enginekit.Helper1"
)]
pub(crate) trait HelperJob {
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn phase(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn percent(&self) -> zbus::Result<i32>;
    #[zbus(property)]
    fn allow_cancel(&self) -> zbus::Result<bool>;
    #[zbus(property)]
    fn receipt(&self) -> zbus::Result<String>;
    fn cancel(&self) -> zbus::Result<()>;
    #[zbus(signal)]
    fn progress(&self, phase: String, percent: i32) -> zbus::Result<()>;
    #[zbus(signal)]
    fn finished(&self, receipt: String) -> zbus::Result<()>;
}

/// The helper on the system bus (`DBUS_SYSTEM_BUS_ADDRESS` is honoured by zbus). The default
/// connects when a host step first needs it, so a ready host never touches the system bus.
#[derive(Debug, Default)]
pub struct SystemHelper {
    conn: OnceCell<Connection>,
}

impl SystemHelper {
    /// Connected now: a caller that needs the bus learns at once that it cannot be reached.
    pub async fn connect() -> Result<SystemHelper, CodedError> {
        let helper = SystemHelper::default();
        helper.conn().await?;
        Ok(helper)
    }

    async fn conn(&self) -> Result<&Connection, CodedError> {
        self.conn
            .get_or_try_init(|| async {
                Connection::system().await.map_err(|e| {
                    CodedError::new(
                        ErrorCode::AdapterUnavailable,
                        "The system bus cannot be reached.",
                    )
                    .with_details(e.to_string())
                })
            })
            .await
    }

    /// The receipts of this user's setups that changed the machine, oldest first, each parsed
    /// and checked as any receipt is.
    pub(crate) async fn setups(&self) -> Result<Vec<Receipt>, CodedError> {
        Ok(self
            .kept_setups()
            .await?
            .into_iter()
            .map(|s| s.receipt)
            .collect())
    }

    /// [`SystemHelper::setups`] with each receipt's exact text as the helper returned it: an
    /// undo step names a setup by the digest of that text.
    pub(crate) async fn kept_setups(&self) -> Result<Vec<KeptSetup>, CodedError> {
        let helper = Helper1Proxy::new(self.conn().await?)
            .await
            .map_err(bus_error)?;
        let texts = helper.setups().await.map_err(bus_error)?;
        texts.into_iter().map(KeptSetup::parse).collect()
    }

    /// Asks the helper to run `step` (polkit may prompt), follows its job with `progress`, and
    /// returns its receipt, refused unless it carries the step's nonce.
    pub(crate) async fn run_undo(
        &self,
        step: &UndoStep,
        progress: ProgressSink,
    ) -> Result<UndoRun, CodedError> {
        let helper = Helper1Proxy::new(self.conn().await?)
            .await
            .map_err(bus_error)?;
        progress(tick(AWAITING_AUTHORIZATION, -1));
        let path = match helper.undo(&step.to_json()).await {
            Ok(path) => path,
            Err(e) if is_declined(&e) => {
                tracing::info!(error = %e, "the undo was not authorized");
                return Ok(UndoRun::Declined);
            }
            Err(e) => return Err(bus_error(e)),
        };
        progress(tick("Authorized; the helper is working", -1));
        let text = self.follow(path.as_str(), &progress).await?;
        let receipt = undo_receipt(&text, step)?;
        Ok(UndoRun::Finished {
            text,
            receipt: Box::new(receipt),
        })
    }

    async fn job(&self, path: &str) -> Result<HelperJobProxy<'static>, CodedError> {
        HelperJobProxy::builder(self.conn().await?)
            .path(path.to_owned())
            .cache_properties(CacheProperties::No)
            .build()
            .await
            .map_err(bus_error)
    }

    /// The helper's process id, from the bus daemon (`None` when it cannot say).
    async fn helper_pid(&self) -> Option<u32> {
        let bus = zbus::fdo::DBusProxy::new(self.conn().await.ok()?)
            .await
            .ok()?;
        let name = zbus::names::BusName::try_from(HELPER_NAME).ok()?;
        bus.get_connection_unix_process_id(name).await.ok()
    }

    async fn follow(&self, path: &str, progress: &ProgressSink) -> Result<String, CodedError> {
        let job = self.job(path).await?;
        let mut finished = job.receive_finished().await.map_err(bus_error)?;
        let mut ticks = job.receive_progress().await.map_err(bus_error)?;
        // Subscribed first, then read: a job that finished meanwhile already has its receipt.
        let now = job.receipt().await.map_err(bus_error)?;
        if !now.is_empty() {
            return Ok(now);
        }
        // Who holds the package manager's lock its package manager waits for: looked up here,
        // without privilege, in the helper's stead.
        let helper = self.helper_pid().await;
        let mut look = tokio::time::interval(Duration::from_secs(1));
        let (mut last, mut holder) = (tick("", -1), None);
        loop {
            tokio::select! {
                Some(signal) = finished.next() => {
                    let args = signal.args().map_err(bus_error)?;
                    return Ok(args.receipt().clone());
                }
                Some(signal) = ticks.next() => {
                    if let Ok(args) = signal.args() {
                        last = tick(args.phase(), *args.percent());
                        progress(last.clone());
                    }
                }
                _ = look.tick(), if helper.is_some() => {
                    let now = helper.and_then(lock_holder::blocking_the_helper);
                    if now != holder {
                        progress(match &now {
                            Some(h) => tick(&format!("waiting for another package manager: {h}"), -1),
                            None => last.clone(),
                        });
                        holder = now;
                    }
                }
                // A lost signal (the helper restarted, the bus hiccuped) is caught by polling.
                _ = tokio::time::sleep(Duration::from_secs(5)) => {
                    let now = job.receipt().await.map_err(bus_error)?;
                    if !now.is_empty() {
                        return Ok(now);
                    }
                }
            }
        }
    }
}

/// One of this user's kept setups: the receipt's text exactly as `Setups` returned it, and
/// the receipt parsed from it.
#[derive(Debug, Clone)]
pub(crate) struct KeptSetup {
    pub(crate) text: String,
    pub(crate) receipt: Receipt,
}

impl KeptSetup {
    /// Parses and checks `text` as any receipt is.
    pub(crate) fn parse(text: String) -> Result<KeptSetup, CodedError> {
        let receipt = Receipt::parse(text.as_bytes()).map_err(|e| {
            CodedError::new(e.code(), "A setup receipt from the helper is not valid.")
                .with_details(e.to_string())
        })?;
        Ok(KeptSetup { text, receipt })
    }

    /// How an undo step names it: the id, and the digest of the exact text.
    pub(crate) fn reference(&self) -> ReceiptRef {
        ReceiptRef::of(self.receipt.receipt_id.clone(), self.text.as_bytes())
    }
}

/// How an undo ended at the helper.
#[derive(Debug, Clone)]
pub(crate) enum UndoRun {
    /// Nobody authorised it (polkit refused, or the dialog was dismissed): nothing ran.
    Declined,
    /// The helper's receipt, its text and parsed.
    Finished { text: String, receipt: Box<Receipt> },
}

/// The helper's receipt of an undo, refused unless it is the receipt of `step` (its nonce and
/// step id).
pub(crate) fn undo_receipt(text: &str, step: &UndoStep) -> Result<Receipt, CodedError> {
    let receipt = Receipt::parse(text.as_bytes()).map_err(|e| {
        CodedError::new(e.code(), "The helper's receipt is not valid.").with_details(e.to_string())
    })?;
    if receipt.nonce != *step.nonce() || receipt.step_id != *step.step_id() {
        return Err(CodedError::new(
            ErrorCode::ReceiptConflict,
            "That result does not match the undo this command asked for.",
        ));
    }
    Ok(receipt)
}

/// The progress label while polkit decides (and an agent may be prompting on the terminal).
pub(crate) const AWAITING_AUTHORIZATION: &str = "Waiting for authorization";

fn tick(phase: &str, percent: i32) -> ProgressTick {
    ProgressTick {
        label: phase.to_owned(),
        completed: u64::try_from(percent).ok(),
        total: (percent >= 0).then_some(100),
        unit: if percent >= 0 { "percent" } else { "unknown" },
    }
}

/// A bus error as a coded error: the helper's messages start with the stable code.
pub(crate) fn bus_error(err: zbus::Error) -> CodedError {
    if let zbus::Error::MethodError(name, message, _) = &err {
        let text = message.clone().unwrap_or_default();
        let code = text
            .split_once(':')
            .and_then(|(code, _)| code.trim().parse::<ErrorCode>().ok())
            .unwrap_or(ErrorCode::IoError);
        return CodedError::new(code, "The helper refused the request.").with_details(format!(
            "{}: {}",
            name.as_str(),
            text
        ));
    }
    CodedError::new(
        ErrorCode::AdapterUnavailable,
        "The helper cannot be reached on the system bus.",
    )
    .with_details(err.to_string())
}

fn error_name(err: &zbus::Error) -> Option<&str> {
    match err {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

/// Whether a `Start` error means nobody authorised the step (nothing ran, nonce not burnt).
fn is_declined(err: &zbus::Error) -> bool {
    use RefusalKind::{InteractionRequired, NotAuthorized, NotAuthorizedDismissed};
    error_name(err).is_some_and(|name| {
        name == "org.freedesktop.DBus.Error.AccessDenied"
            || matches!(
                RefusalKind::from_error_name(name),
                Some(InteractionRequired | NotAuthorized | NotAuthorizedDismissed)
            )
    })
}

/// Reduce the helper's receipt to what the broker decides on, refusing one for another step.
pub(crate) fn summarise(
    text: &str,
    step_id: &str,
    nonce: &str,
) -> Result<ReceiptSummary, CodedError> {
    let receipt = Receipt::parse(text.as_bytes()).map_err(|e| {
        CodedError::new(e.code(), "The helper's receipt is not valid.").with_details(e.to_string())
    })?;
    if receipt.nonce.as_str() != nonce || receipt.step_id.as_str() != step_id {
        return Err(CodedError::new(
            ErrorCode::ReceiptConflict,
            "That result does not match the authorization this operation is waiting for.",
        ));
    }
    let digest = receipt.identity_digest().map_err(|e| {
        CodedError::new(
            ErrorCode::MetadataInvalid,
            "The receipt cannot be digested.",
        )
        .with_details(e.to_string())
    })?;
    if !receipt.changes.is_empty() {
        // What an undo will be planned from; the probe after the step is still the evidence.
        tracing::info!(outcome = receipt.outcome.as_str(), changes = %receipt.changes.summary(), "what the host step changed");
    }
    if !receipt.restored.is_empty() {
        // A cancelled step's summary shows no tail: its journal line says it.
        tracing::info!(outcome = receipt.outcome.as_str(), restored = ?receipt.restored, "the helper put files back as they were before the step");
    }
    let tail = shown_tail(&receipt.actions, &receipt.restored);
    let cause = receipt
        .actions
        .iter()
        .filter(|a| a.status == ActionStatus::Failed)
        .find_map(|a| cause::package_cause(&a.log_tail));
    Ok(ReceiptSummary {
        step_id: receipt.step_id.as_str().to_owned(),
        nonce: receipt.nonce.as_str().to_owned(),
        outcome: match receipt.outcome {
            Outcome::Succeeded => HostOutcome::Succeeded,
            Outcome::Failed => HostOutcome::Failed,
            Outcome::Cancelled => HostOutcome::Cancelled,
        },
        digest,
        error: receipt.error.clone(),
        log_tail: (!tail.is_empty()).then_some(tail),
        cause,
    })
}

impl Elevator for SystemHelper {
    async fn run_step(
        &self,
        step: &HostStep,
        progress: ProgressSink,
        on_job: JobNote,
    ) -> Result<HostRun, CodedError> {
        let helper = Helper1Proxy::new(self.conn().await?)
            .await
            .map_err(bus_error)?;
        progress(tick(AWAITING_AUTHORIZATION, -1));
        let text = step.to_text().map_err(|e| {
            CodedError::new(e.code(), "The host step cannot be encoded.")
                .with_details(e.to_string())
        })?;
        let path = match helper.start(&text).await {
            Ok(path) => path,
            Err(e) if is_declined(&e) => {
                tracing::info!(error = %e, "the host step was not authorized");
                return Ok(HostRun::Declined);
            }
            Err(e) => return Err(bus_error(e)),
        };
        on_job(path.as_str());
        // Authorized: whatever the job reports next, the prompt (if any) is over.
        progress(tick("Authorized; the helper is working", -1));
        let text = self.follow(path.as_str(), &progress).await?;
        Ok(HostRun::Finished(summarise(
            &text,
            step.step_id().as_str(),
            step.nonce().as_str(),
        )?))
    }

    async fn receipt(&self, nonce: &str, job: Option<&str>) -> Result<ReceiptLookup, CodedError> {
        let helper = Helper1Proxy::new(self.conn().await?)
            .await
            .map_err(bus_error)?;
        match helper.get_receipt(nonce).await {
            Ok(text) => {
                let parsed = Receipt::parse(text.as_bytes()).map_err(|e| {
                    CodedError::new(e.code(), "The helper's receipt is not valid.")
                        .with_details(e.to_string())
                })?;
                let summary = summarise(&text, parsed.step_id.as_str(), nonce)?;
                Ok(ReceiptLookup::Finished(summary))
            }
            Err(e)
                if error_name(&e).and_then(RefusalKind::from_error_name)
                    == Some(RefusalKind::NoReceipt) =>
            {
                // No receipt yet: a job of ours still running, or a nonce never accepted.
                let Some(path) = job else {
                    return Ok(ReceiptLookup::Unknown);
                };
                match self.job(path).await?.state().await {
                    Ok(state) if state == "running" => Ok(ReceiptLookup::Pending),
                    _ => Ok(ReceiptLookup::Unknown),
                }
            }
            Err(e) => Err(bus_error(e)),
        }
    }
}

/// The failed actions, then the files the helper put back as they were because the step did
/// not finish (a failure or a cancel after a write).
fn shown_tail(
    actions: &[enginekit_shared::wire::receipt::ActionRecord],
    restored: &[String],
) -> String {
    let restored = (!restored.is_empty()).then(|| {
        format!(
            "Put back as they were before the step: {}",
            restored.join(", ")
        )
    });
    [Some(failed_actions(actions)), restored]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the user is shown of a failed job: the actions whose status the helper recorded as
/// failed (a query that answered non-zero, or an action that ran no command, is not a failure),
/// each with its exit status and log tail.
fn failed_actions(actions: &[enginekit_shared::wire::receipt::ActionRecord]) -> String {
    let show = |a: &enginekit_shared::wire::receipt::ActionRecord| {
        let status = match a.exit_status {
            Some(code) => format!("exit status {code}"),
            None => "no exit status: killed, or no command".to_owned(),
        };
        format!("{} ({status}):\n{}", a.code, a.log_tail)
    };
    actions
        .iter()
        .filter(|a| a.status == ActionStatus::Failed)
        .map(show)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::{failed_actions, shown_tail, undo_receipt};
    use enginekit_shared::digest::Digest;
    use enginekit_shared::error::ErrorCode;
    use enginekit_shared::nonce::Nonce;
    use enginekit_shared::undo::UndoPlan;
    use enginekit_shared::wire::changes::HostChanges;
    use enginekit_shared::wire::receipt::{Outcome, Receipt, ReceiptId};
    use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep};

    #[test]
    fn an_undo_receipt_is_taken_only_for_its_own_step() {
        let plan = UndoPlan {
            remove_packages: vec!["docker-ce".into()],
            ..UndoPlan::default()
        };
        let refs = vec![ReceiptRef::of(ReceiptId::generate().unwrap(), b"r")];
        let step = UndoStep::issue(refs, plan).unwrap();
        let mut receipt = Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: step.step_id().clone(),
            nonce: step.nonce().clone(),
            expected_operation_revision: 0,
            recipe_digest: step.plan_digest().clone(),
            parameters_digest: Digest::ZERO,
            started_at: "2026-12-02T16:40:00Z".parse().unwrap(),
            finished_at: "2026-12-02T16:41:00Z".parse().unwrap(),
            outcome: Outcome::Succeeded,
            actions: Vec::new(),
            error: None,
            restored: Vec::new(),
            changes: HostChanges::default(),
        };
        let text = String::from_utf8(receipt.to_bytes().unwrap()).unwrap();
        assert_eq!(undo_receipt(&text, &step).unwrap(), receipt);
        receipt.nonce = Nonce::generate().unwrap();
        let text = String::from_utf8(receipt.to_bytes().unwrap()).unwrap();
        let err = undo_receipt(&text, &step).unwrap_err();
        assert_eq!(err.code, ErrorCode::ReceiptConflict);
        let err = undo_receipt("{}", &step).unwrap_err();
        assert_ne!(err.code, ErrorCode::ReceiptConflict);
    }

    use enginekit_shared::wire::receipt::{ActionRecord, ActionStatus};

    fn action(
        code: &str,
        status: ActionStatus,
        exit_status: Option<i32>,
        log_tail: &str,
    ) -> ActionRecord {
        ActionRecord {
            code: code.into(),
            status,
            argv: Vec::new(),
            exit_status,
            duration_ms: 1,
            log_tail: log_tail.into(),
        }
    }

    #[test]
    fn only_the_actions_the_helper_marked_failed_are_shown_with_a_readable_status() {
        use ActionStatus::{Applied, Failed, NotRun, Satisfied};
        let shown = failed_actions(&[
            action("nvidia-source", Applied, None, "applied: wrote the list"),
            action(
                "conflicts",
                Satisfied,
                Some(1),
                "satisfied: no conflicting package",
            ),
            action(
                "refresh",
                Failed,
                Some(100),
                "failed: /usr/bin/apt-get exited with 100",
            ),
            action(
                "packages",
                NotRun,
                None,
                "not-run: an earlier action failed",
            ),
        ]);
        assert_eq!(
            shown,
            "refresh (exit status 100):\nfailed: /usr/bin/apt-get exited with 100"
        );
        assert!(!shown.contains("Some("), "{shown}");
        let killed = failed_actions(&[action(
            "packages",
            Failed,
            None,
            "failed: killed by SIGTERM",
        )]);
        assert!(killed.starts_with("packages (no exit status"), "{killed}");
        // A tail cut from its end lost its "failed:" mark: the recorded status still shows it,
        // and a satisfied query that exited non-zero is still not shown.
        let cut = failed_actions(&[
            action("conflicts", Satisfied, Some(1), "...no conflicting package"),
            action(
                "packages",
                Failed,
                Some(100),
                "...E: Unable to locate package x",
            ),
            action(
                "nvidia-runtime",
                NotRun,
                None,
                "not-run: an earlier action failed",
            ),
        ]);
        assert_eq!(
            cut,
            "packages (exit status 100):\n...E: Unable to locate package x"
        );
    }

    #[test]
    fn the_files_put_back_are_said_after_the_failed_actions() {
        let failed = [action(
            "refresh",
            ActionStatus::Failed,
            Some(100),
            "failed: apt",
        )];
        let restored = ["/etc/apt/sources.list.d/docker.list".to_owned()];
        assert_eq!(
            shown_tail(&failed, &restored),
            "refresh (exit status 100):\nfailed: apt\nPut back as they were before the step: /etc/apt/sources.list.d/docker.list"
        );
        // A cancelled step has no failed action: the files alone.
        assert_eq!(
            shown_tail(&[], &restored),
            "Put back as they were before the step: /etc/apt/sources.list.d/docker.list"
        );
        assert_eq!(
            shown_tail(&failed, &[]),
            "refresh (exit status 100):\nfailed: apt"
        );
    }
}
