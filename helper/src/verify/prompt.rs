//! What polkit is told about a step: the digests site rules can pin, and what the job will
//! really do on this machine, by the shared rule over the planned actions
//! ([`change_details`]), never from what the caller says it wants. The policy's own message is
//! kept; agents show these details under it and rules read them with `action.lookup(key)`.

use enginekit_shared::recipe::prompt::{change_details, HostFiles};

use super::VerifiedStep;
use crate::recipe::commands::{CDI_REFRESH_DROPIN, CDI_REFRESH_UNIT, CDI_SPEC, DAEMON_JSON};

/// The files and unit the helper's actions change beyond the plan's own paths.
const HOST_FILES: HostFiles<'static> = HostFiles {
    daemon_json: DAEMON_JSON,
    cdi_spec: CDI_SPEC,
    cdi_refresh_dropin: CDI_REFRESH_DROPIN,
    cdi_refresh_unit: CDI_REFRESH_UNIT,
};

/// The keys and values handed to polkit as the check's details.
pub(crate) fn details(verified: &VerifiedStep) -> Vec<(&'static str, String)> {
    let (step, parameters) = (&verified.step, verified.step.parameters());
    let mut out = vec![
        ("recipe_id", step.recipe_id().as_str().to_owned()),
        ("recipe_digest", step.recipe_digest().to_string()),
        ("parameters_digest", step.parameters_digest().to_string()),
        ("user", parameters.user().as_str().to_owned()),
        ("components", super::components(parameters)),
    ];
    out.extend(change_details(&verified.plan, &HOST_FILES));
    out
}
