//! What a broker does with an operation it finds unfinished when it starts.
//!
//! The pure part lives here: how a record is taken over. The runner asks the machine (and the
//! helper, for a host step already handed over) and feeds the answers back through the reducer.

use super::record::{EffectKind, Operation, OperationKind, Phase};

/// How an unfinished record is to be picked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Pickup {
    /// Finished: nothing to do.
    Unchanged,
    /// Waiting on the user's consent: leave it waiting.
    AwaitConsent,
    /// A host step went to the helper: ask the helper for the receipt of this nonce first.
    AskHelper { nonce: String },
    /// Look at the machine again from the checkpoint.
    Restart,
}

pub(crate) fn pickup(op: &Operation) -> Pickup {
    if op.is_terminal() && op.sent_nonce().is_none() {
        return Pickup::Unchanged;
    }
    if op.phase == Phase::AwaitingConsent {
        return Pickup::AwaitConsent;
    }
    if let Some(nonce) = op.sent_nonce() {
        return Pickup::AskHelper {
            nonce: nonce.to_owned(),
        };
    }
    if op.is_terminal() {
        return Pickup::Unchanged;
    }
    Pickup::Restart
}

/// Take a record over after a restart: a new instance, a new revision, the checkpoint kept,
/// the single-use authorisation dropped (never re-elevated on its own), and a reconcile first.
pub(crate) fn restarted(op: &Operation, instance_id: String) -> Operation {
    let mut next = op.clone();
    next.revision += 1;
    next.instance_id = instance_id;
    next.pending_host_step = None;
    next.host_job = None;
    next.indivisible_host_step_running = false;
    next.error = None;
    let kind = if op.kind == OperationKind::Remove {
        next.phase = Phase::Removing;
        EffectKind::Remove
    } else {
        next.phase = Phase::Checking;
        EffectKind::Reconcile
    };
    next.pending_effect = Some(super::record::EffectIntent {
        effect_id: format!("{}:{}:{}", next.operation_id, next.revision, kind.as_str()),
        expected_revision: next.revision,
        kind,
    });
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::EngineId;
    use crate::operations::record::OperationId;
    use crate::operations::reducer::{reduce, start, Answer, Event};
    use enginekit_shared::error::{CodedError, ErrorCode};

    fn op() -> Operation {
        start(
            OperationId::fresh().unwrap(),
            EngineId::parse("vllm").unwrap(),
            OperationKind::Setup,
            true,
            None,
            "a".into(),
        )
    }

    #[test]
    fn keeps_the_checkpoint_and_moves_ownership_to_the_running_broker() {
        let mut o = op();
        o.checkpoint = Some(Phase::PullingImage);
        o.phase = Phase::PullingImage;
        let r = restarted(&o, "b".into());
        assert_eq!(r.checkpoint, Some(Phase::PullingImage));
        assert_eq!(r.instance_id, "b");
        assert_eq!(r.revision, o.revision + 1);
        assert_eq!(r.phase, Phase::Checking);
        assert_eq!(
            r.pending_effect.as_ref().unwrap().kind,
            EffectKind::Reconcile
        );
        assert_eq!(
            r.pending_effect.as_ref().unwrap().expected_revision,
            r.revision
        );
    }

    #[test]
    fn leaves_a_finished_operation_as_it_was_and_a_consent_wait_waiting() {
        let mut o = op();
        o.phase = Phase::Ready;
        o.pending_effect = None;
        assert_eq!(pickup(&o), Pickup::Unchanged);
        o.phase = Phase::AwaitingConsent;
        assert_eq!(pickup(&o), Pickup::AwaitConsent);
        o.phase = Phase::PullingImage;
        assert_eq!(pickup(&o), Pickup::Restart);
    }

    #[test]
    fn asks_the_helper_about_a_host_step_it_handed_over_even_after_a_failure() {
        let mut o = op();
        use crate::operations::record::PendingHostStep;
        let request = crate::operations::reducer::tests::ticket("ana");
        o.pending_host_step = Some(PendingHostStep::Consented(request.clone()));
        o.phase = Phase::PreparingHost;
        assert_eq!(
            pickup(&o),
            Pickup::Restart,
            "not handed over yet: nothing to ask"
        );
        let step = request
            .issue(enginekit_shared::wire::Timestamp::now(), 1)
            .unwrap();
        let nonce = step.nonce().as_str().to_owned();
        o.pending_host_step = Some(PendingHostStep::Sent(step));
        assert_eq!(
            pickup(&o),
            Pickup::AskHelper {
                nonce: nonce.clone()
            }
        );
        let effect = o.pending_effect.clone().unwrap();
        o.pending_effect = Some(crate::operations::record::EffectIntent {
            kind: EffectKind::HostStep,
            ..effect
        });
        let failed = reduce(
            &o,
            &Event::answer(
                o.pending_effect.as_ref().unwrap(),
                Answer::Failed(CodedError::new(ErrorCode::IoError, "x")),
            ),
        )
        .unwrap();
        assert_eq!(pickup(&failed), Pickup::AskHelper { nonce });
        let r = restarted(&failed, "c".into());
        assert!(
            r.pending_host_step.is_none(),
            "the spent authorisation is dropped"
        );
        assert_eq!(pickup(&r), Pickup::Restart);
    }

    #[test]
    fn a_removal_restarts_removing() {
        let o = start(
            OperationId::fresh().unwrap(),
            EngineId::parse("vllm").unwrap(),
            OperationKind::Remove,
            true,
            None,
            "a".into(),
        );
        let r = restarted(&o, "b".into());
        assert_eq!(r.phase, Phase::Removing);
        assert_eq!(r.pending_effect.as_ref().unwrap().kind, EffectKind::Remove);
    }
}
