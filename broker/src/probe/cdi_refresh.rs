//! The NVIDIA toolkit's own keeper of the CDI spec: `nvidia-cdi-refresh.path` (toolkit 1.18 and
//! later) starts `nvidia-cdi-refresh.service`, which generates the spec again when the driver
//! changes. When a spec was left for an older driver, whether that unit is enabled and whether
//! its service ran after the driver came says what to fix: enable it, or read why it failed.
//! Read only then (a spec for another driver, systemd as PID 1), so a probe of a sound machine
//! pays nothing for it.

use serde::{Deserialize, Serialize};

/// The units' state, when the toolkit ships them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CdiRefresh {
    /// The `.path` unit's file state: `enabled`, `disabled`, `masked`, ….
    pub(crate) path_unit_state: String,
    /// When the service last finished (seconds since the epoch); `None`: not since boot.
    pub(crate) last_run: Option<u64>,
    /// How it last ended (`success`, `exit-code`, …), when it ran.
    pub(crate) result: Option<String>,
    /// When the loaded driver's libcuda came, from its change time: the driver update.
    pub(crate) driver_installed_at: Option<u64>,
}

/// The units, as `systemctl show` names them.
pub(crate) const PATH_UNIT: &str = "nvidia-cdi-refresh.path";
pub(crate) const SERVICE_UNIT: &str = "nvidia-cdi-refresh.service";

/// `systemctl show` of both units, `--timestamp=unix`.
pub(crate) const SHOW_ARGS: [&str; 6] = [
    "show",
    "--timestamp=unix",
    "--property=Id,LoadState,UnitFileState,ExecMainExitTimestamp,Result",
    "--",
    PATH_UNIT,
    SERVICE_UNIT,
];

/// Reads `systemctl show` output: `None` when the toolkit ships no `.path` unit.
pub(crate) fn parse_show(text: &str) -> Option<CdiRefresh> {
    let blocks: Vec<Vec<(&str, &str)>> = text
        .split("\n\n")
        .map(|block| block.lines().filter_map(|l| l.split_once('=')).collect())
        .collect();
    let unit = |id: &str| {
        blocks
            .iter()
            .find(|b| b.iter().any(|(k, v)| *k == "Id" && *v == id))
    };
    let value = |block: &Vec<(&str, &str)>, key: &str| {
        block
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| (*v).to_owned())
            .filter(|v| !v.is_empty())
    };
    let path = unit(PATH_UNIT)?;
    if value(path, "LoadState").as_deref() != Some("loaded") {
        return None;
    }
    let service = unit(SERVICE_UNIT);
    let last_run = service
        .and_then(|s| value(s, "ExecMainExitTimestamp"))
        .and_then(|t| t.trim_start_matches('@').parse::<u64>().ok())
        .filter(|t| *t > 0);
    Some(CdiRefresh {
        path_unit_state: value(path, "UnitFileState").unwrap_or_else(|| "unknown".to_owned()),
        last_run,
        result: last_run.and(service.and_then(|s| value(s, "Result"))),
        driver_installed_at: None,
    })
}

impl CdiRefresh {
    /// One sentence for the plan and the doctor: whether the unit is enabled and whether its
    /// service ran after the driver changed.
    pub(crate) fn sentence(&self) -> String {
        if self.path_unit_state != "enabled" {
            return format!(
                "The toolkit's {PATH_UNIT}, which generates the spec again when the driver changes, is {} (sudo systemctl enable --now {PATH_UNIT}).",
                self.path_unit_state
            );
        }
        let ran_after = match (self.last_run, self.driver_installed_at) {
            (Some(run), Some(driver)) => Some(run >= driver),
            _ => None,
        };
        match (self.last_run, ran_after, self.result.as_deref()) {
            (None, _, _) => format!(
                "{PATH_UNIT} is enabled, but {SERVICE_UNIT} has not run since the machine started."
            ),
            (Some(_), Some(false), _) => format!(
                "{PATH_UNIT} is enabled, but {SERVICE_UNIT} last ran before the driver changed."
            ),
            (Some(_), _, Some(result)) if result != "success" => format!(
                "{SERVICE_UNIT} ran after the driver changed and failed ({result}): journalctl -u {SERVICE_UNIT}."
            ),
            _ => format!(
                "{PATH_UNIT} is enabled and {SERVICE_UNIT} ran, yet the spec still names the old driver: journalctl -u {SERVICE_UNIT}."
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What systemd 252 prints (properties in its own order, one block per unit).
    const ENABLED_RAN: &str = "Result=success\nId=nvidia-cdi-refresh.path\nLoadState=loaded\nUnitFileState=enabled\n\nExecMainExitTimestamp=@1765000000\nResult=exit-code\nId=nvidia-cdi-refresh.service\nLoadState=loaded\nUnitFileState=static\n";

    #[test]
    fn the_units_are_read_from_systemctl_show() {
        let units = parse_show(ENABLED_RAN).expect("units");
        assert_eq!(units.path_unit_state, "enabled");
        assert_eq!(units.last_run, Some(1_765_000_000));
        assert_eq!(units.result.as_deref(), Some("exit-code"));
        // No toolkit units: systemctl answers not-found, nothing to say.
        let absent = "Result=success\nId=nvidia-cdi-refresh.path\nLoadState=not-found\nUnitFileState=\n\nExecMainExitTimestamp=\nResult=success\nId=nvidia-cdi-refresh.service\nLoadState=not-found\nUnitFileState=\n";
        assert_eq!(parse_show(absent), None);
        assert_eq!(parse_show(""), None);
        // Never run since boot: no time, no result.
        let never = ENABLED_RAN.replace("@1765000000", "");
        let units = parse_show(&never).expect("units");
        assert_eq!((units.last_run, units.result), (None, None));
    }

    #[test]
    fn the_sentence_says_whether_it_is_enabled_and_ran_after_the_driver_changed() {
        let mut units = parse_show(ENABLED_RAN).expect("units");
        units.driver_installed_at = Some(1_765_000_100);
        assert!(units
            .sentence()
            .contains("last ran before the driver changed"));
        units.driver_installed_at = Some(1_764_999_000);
        assert!(units.sentence().contains("failed (exit-code)"));
        units.path_unit_state = "disabled".to_owned();
        assert!(units
            .sentence()
            .contains("is disabled (sudo systemctl enable --now nvidia-cdi-refresh.path)"));
    }
}
