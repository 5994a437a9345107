//! A text polkit agent for the terminal: when the session has no agent registered and a TTY
//! is there, `pkttyagent --process <our pid> --fallback` answers the helper's prompt.

use std::io::IsTerminal;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running `pkttyagent`, stopped when dropped.
#[derive(Debug)]
pub(crate) struct TtyAgent {
    child: Child,
}

impl Drop for TtyAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `pkttyagent` for this process if stdin is a terminal and the binary exists. With
/// `--fallback` it steps aside when a desktop agent is already registered for the session.
pub(crate) fn start_if_needed() -> Option<TtyAgent> {
    if !std::io::stdin().is_terminal() {
        return None;
    }
    let binary = crate::programs::find("pkttyagent")?;
    // Its prompt is for the user (their language, their terminal); it stays in the terminal's
    // foreground process group to read the password.
    let child = crate::programs::command(&binary, crate::programs::Reader::User)
        .arg("--process")
        .arg(std::process::id().to_string())
        .arg("--fallback")
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // pkttyagent registers asynchronously; give it a moment before the helper asks polkit.
    std::thread::sleep(Duration::from_millis(300));
    Some(TtyAgent { child })
}
