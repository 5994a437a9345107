//! The user's systemd manager, through `systemctl --user` and `loginctl` (found in the system
//! directories, a cleared environment but for what reaches the user's manager; fixed argv).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use enginekit_shared::error::{CodedError, ErrorCode};

use crate::programs::{self, Reader};

/// How long one `systemctl --user` call may take (enable/disable with `--now` wait for the
/// job; a stop waits for the engine's confirmed stop, at most the unit's TimeoutStopSec).
const CALL: Duration = Duration::from_secs(90);

/// What a unit is doing now, from `systemctl --user show`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct UnitState {
    /// `active`, `activating`, `failed`, `inactive`, …
    pub(crate) active: String,
    /// `running`, `auto-restart`, `dead`, `failed`, …
    pub(crate) sub: String,
    /// `success`, `exit-code`, `start-limit-hit`, …
    pub(crate) result: String,
    /// The main process's last exit status.
    pub(crate) exit_status: Option<i32>,
    pub(crate) restarts: u32,
    /// `enabled`, `disabled`, …
    pub(crate) enabled: String,
}

fn unavailable(detail: impl Into<String>) -> CodedError {
    CodedError::new(
        ErrorCode::PrerequisiteBlocked,
        "Your systemd user manager cannot be reached, so a model cannot be kept: keep is for a \
         login session under systemd (`systemctl --user status` should answer).",
    )
    .with_details(detail.into())
}

/// The variables that lead `systemctl --user` to the user's manager: absolute, printable.
fn manager_env() -> Vec<(&'static str, OsString)> {
    ["XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "HOME"]
        .into_iter()
        .filter_map(|name| {
            let value = std::env::var_os(name)?;
            let text = value.to_str()?;
            (!text.is_empty() && !text.chars().any(char::is_control)).then_some((name, value))
        })
        .collect()
}

async fn run(program: &str, args: &[&str]) -> Result<String, CodedError> {
    let path: PathBuf = programs::find(program)
        .ok_or_else(|| unavailable(format!("no {program} on this system")))?;
    let mut command = tokio::process::Command::from(programs::command(&path, Reader::Broker));
    command
        .args(args)
        .envs(manager_env())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(CALL, command.output())
        .await
        .map_err(|_| unavailable(format!("{program} {} did not answer", args.join(" "))))?
        .map_err(|e| unavailable(format!("{program}: {e}")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(CodedError::new(
            ErrorCode::IoError,
            format!("`{program} {}` failed.", args.join(" ")),
        )
        .with_details(String::from_utf8_lossy(&output.stderr).trim().to_owned()))
    }
}

async fn systemctl(args: &[&str]) -> Result<String, CodedError> {
    let mut all = vec!["--user"];
    all.extend_from_slice(args);
    run("systemctl", &all).await
}

/// The user manager's systemd version (its `Version` property, e.g. `252.39-1~deb12u1`).
pub(crate) async fn manager_version() -> Result<u32, CodedError> {
    let text = systemctl(&["show", "--property=Version", "--value"])
        .await
        .map_err(|e| unavailable(e.details.unwrap_or(e.message)))?;
    text.trim()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| unavailable(format!("an unreadable version: {text:?}")))
}

pub(crate) async fn daemon_reload() -> Result<(), CodedError> {
    systemctl(&["daemon-reload"]).await.map(drop)
}

/// Enables `unit` (started at every login, at boot with lingering) and starts it without
/// waiting for the engine: the caller follows the start itself.
pub(crate) async fn enable_now(unit: &str) -> Result<(), CodedError> {
    systemctl(&["enable", "--now", "--no-block", unit])
        .await
        .map(drop)
}

/// Stops `unit` (its `enginekit start` stops the engine, confirmed) and disables it.
pub(crate) async fn disable_now(unit: &str) -> Result<(), CodedError> {
    systemctl(&["disable", "--now", unit]).await.map(drop)
}

/// A failed unit forgotten (its failed state and restart counter), so the next start is clean.
pub(crate) async fn reset_failed(unit: &str) {
    let _ = systemctl(&["reset-failed", unit]).await;
}

pub(crate) async fn state(unit: &str) -> Result<UnitState, CodedError> {
    let text = systemctl(&[
        "show",
        "--property=ActiveState,SubState,Result,ExecMainStatus,NRestarts,UnitFileState",
        unit,
    ])
    .await?;
    Ok(parse_show(&text))
}

fn parse_show(text: &str) -> UnitState {
    let mut state = UnitState::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key {
            "ActiveState" => state.active = value.to_owned(),
            "SubState" => state.sub = value.to_owned(),
            "Result" => state.result = value.to_owned(),
            "ExecMainStatus" => state.exit_status = value.parse().ok(),
            "NRestarts" => state.restarts = value.parse().unwrap_or(0),
            "UnitFileState" => state.enabled = value.to_owned(),
            _ => {}
        }
    }
    state
}

/// Whether the user's manager outlives their sessions and starts at boot (`loginctl
/// enable-linger`). Unknown counts as off.
pub(crate) async fn lingering() -> bool {
    let user = nix::unistd::getuid().to_string();
    run(
        "loginctl",
        &["show-user", &user, "--property=Linger", "--value"],
    )
    .await
    .is_ok_and(|v| v.trim() == "yes")
}

/// The last lines the unit wrote to the user's journal.
pub(crate) async fn journal_tail(unit: &str, lines: u32) -> String {
    let lines = lines.to_string();
    run(
        "journalctl",
        &[
            "--user",
            "--unit",
            unit,
            "--no-pager",
            "--output=cat",
            "--lines",
            &lines,
        ],
    )
    .await
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_is_read_by_key() {
        let s = parse_show(
            "ActiveState=failed\nSubState=failed\nResult=exit-code\nExecMainStatus=78\nNRestarts=0\nUnitFileState=enabled\nOdd line\n",
        );
        assert_eq!(s.active, "failed");
        assert_eq!(s.result, "exit-code");
        assert_eq!(s.exit_status, Some(78));
        assert_eq!(s.enabled, "enabled");
        assert_eq!(parse_show("").exit_status, None);
    }
}
