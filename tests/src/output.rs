//! Reading what a finished `enginekit` run printed.

use std::process::Output;

use serde_json::Value;

/// Status, stdout and stderr, for an assertion message.
pub fn describe(out: &Output) -> String {
    format!(
        "status {}\nstdout {}\nstderr {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The JSON lines of a `--json` run.
pub fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l}: {e}")))
        .collect()
}

/// The last `result` or `error` event of a `--json` run.
pub fn result_of(out: &Output) -> Value {
    events(out)
        .into_iter()
        .rev()
        .find(|e| e["event"] == "result" || e["event"] == "error")
        .unwrap_or_else(|| panic!("no result event: {}", describe(out)))
}
