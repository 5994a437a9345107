//! The text of a kept model's systemd user unit, from what `start --keep` resolved. Pure: the
//! same pins give the same bytes, so an edit by hand is told from our own file by its digest.
//!
//! The unit runs `enginekit start` itself (never a container directly), so every start runs the
//! same checks a start by hand does (the fit, the CDI spec against the loaded driver, the GPU
//! claim, the health check) and keeps the engine's heartbeat and watchdog. A check that fails
//! exits with [`NOT_RETRIED`], which the unit names in `RestartPreventExitStatus=`: systemd stops
//! retrying at once and the journal and `enginekit ps` say why; a crash is restarted with a
//! growing delay, within a start limit.

use std::path::Path;

use crate::engine::options::SessionName;

/// The exit status of a kept start whose checks refuse it (sysexits' EX_CONFIG): not retried.
pub(crate) const NOT_RETRIED: u8 = 78;
/// How many starts systemd allows in [`START_LIMIT_SECS`] (`--keep-restarts`, default).
pub(crate) const DEFAULT_RESTARTS: u32 = 5;
/// The range `--keep-restarts` accepts.
pub(crate) const RESTARTS: std::ops::RangeInclusive<u32> = 1..=20;
/// The window of the start limit.
const START_LIMIT_SECS: u32 = 1800;
/// The first restart delay; systemd 254 and later grow it to [`MAX_DELAY_SECS`].
const FIRST_DELAY_SECS: u32 = 10;
const MAX_DELAY_SECS: u32 = 300;
/// The first systemd with `RestartSteps=` and `RestartMaxDelaySec=`.
const GROWING_DELAY_SINCE: u32 = 254;

/// What a kept model pins: what `start` resolved when it was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pins {
    pub(crate) name: SessionName,
    pub(crate) engine: String,
    /// The model as `start` takes it: a folder's absolute path, or `org/name@commit`.
    pub(crate) model: String,
    /// The hub cache the model is in (`HF_HUB_CACHE`), for a model on the hub: the user's
    /// manager does not have the login shell's environment.
    pub(crate) hub_cache: Option<String>,
    pub(crate) gpu: String,
    pub(crate) port: u16,
    pub(crate) context: u32,
    /// The engine image's digest (`sha256:…`) of the installation it was kept on.
    pub(crate) image_digest: String,
    /// Seconds a start may take to become ready.
    pub(crate) timeout_secs: u32,
}

/// How the unit restarts and which systemd it is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    pub(crate) restarts: u32,
    pub(crate) systemd_version: u32,
}

/// `enginekit-model-NAME.service`.
pub(crate) fn unit_name(name: &SessionName) -> String {
    format!("enginekit-model-{}.service", name.as_str())
}

/// The unit file's text; `None` when an argument cannot be written on an `ExecStart=` line (a
/// control character in a path).
pub(crate) fn text(program: &Path, pins: &Pins, policy: Policy) -> Option<String> {
    let program = program.to_str()?;
    let mut argv: Vec<String> = vec![
        program.to_owned(),
        "start".to_owned(),
        pins.model.clone(),
        "--engine".to_owned(),
        pins.engine.clone(),
        "--name".to_owned(),
        pins.name.as_str().to_owned(),
        "--gpu".to_owned(),
        pins.gpu.clone(),
        "--port".to_owned(),
        pins.port.to_string(),
        "--context".to_owned(),
        pins.context.to_string(),
        "--timeout".to_owned(),
        pins.timeout_secs.to_string(),
        "--pinned-image".to_owned(),
        pins.image_digest.clone(),
    ];
    let exec: Vec<String> = argv.drain(..).map(|a| quoted(&a)).collect::<Option<_>>()?;
    let cache = match &pins.hub_cache {
        // No variable expansion in Environment=, only specifiers: `$` stays as it is.
        Some(dir) => format!(
            "Environment={}\n",
            quoted_as(&format!("HF_HUB_CACHE={dir}"), Expands::SpecifiersOnly)?
        ),
        None => String::new(),
    };
    let growing = if policy.systemd_version >= GROWING_DELAY_SINCE {
        format!("RestartSteps=5\nRestartMaxDelaySec={MAX_DELAY_SECS}\n")
    } else {
        String::new()
    };
    Some(format!(
        "# Written by `enginekit start --keep`. `enginekit stop {name}` stops, disables and removes it;\n\
         # an edited copy is never overwritten (enginekit refuses and says so).\n\
         [Unit]\n\
         Description=enginekit model {name} ({engine} on {gpu}, 127.0.0.1:{port})\n\
         StartLimitIntervalSec={START_LIMIT_SECS}\n\
         StartLimitBurst={restarts}\n\
         \n\
         [Service]\n\
         Type=notify\n\
         NotifyAccess=main\n\
         ExecStart={exec}\n\
         # The model is in the Hugging Face cache at its pinned commit: no hub, no token.\n\
         Environment=HF_HUB_OFFLINE=1\n\
         {cache}\
         Restart=on-failure\n\
         RestartSec={FIRST_DELAY_SECS}\n\
         {growing}\
         RestartPreventExitStatus={NOT_RETRIED}\n\
         TimeoutStartSec={start_timeout}\n\
         TimeoutStopSec=60\n\
         KillMode=mixed\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        name = pins.name.as_str(),
        engine = pins.engine,
        gpu = pins.gpu,
        port = pins.port,
        restarts = policy.restarts,
        exec = exec.join(" "),
        // The load's own timeout, plus the time to reach Docker and claim the card.
        start_timeout = pins.timeout_secs + 120,
    ))
}

/// What systemd expands in a setting's value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Expands {
    /// `ExecStart=`: specifiers (`%`) and variables (`$`).
    SpecifiersAndVariables,
    /// `Environment=`: specifiers only.
    SpecifiersOnly,
}

/// One `ExecStart=` word ([`quoted_as`]).
fn quoted(word: &str) -> Option<String> {
    quoted_as(word, Expands::SpecifiersAndVariables)
}

/// `word` double-quoted, with what systemd would expand doubled and `\` and `"` escaped;
/// `None` for a control character.
fn quoted_as(word: &str, expands: Expands) -> Option<String> {
    if word.chars().any(char::is_control) {
        return None;
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('"');
    for c in word.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' if expands == Expands::SpecifiersAndVariables => out.push_str("$$"),
            c => out.push(c),
        }
    }
    out.push('"');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins() -> Pins {
        Pins {
            name: SessionName::parse("qwen").unwrap(),
            engine: "vllm".to_owned(),
            model: "Qwen/Qwen2.5-0.5B@0123456789abcdef0123456789abcdef01234567".to_owned(),
            gpu: "GPU-9c2f1a7e-3b4d-4c5e-8f60-718293a4b5c6".to_owned(),
            port: 41234,
            context: 8192,
            image_digest: format!("sha256:{}", "a".repeat(64)),
            timeout_secs: 600,
            hub_cache: Some("/home/u/.cache/huggingface/hub".to_owned()),
        }
    }

    #[test]
    fn the_unit_runs_the_pinned_start_and_stops_retrying_when_a_check_refuses() {
        let policy = Policy {
            restarts: 5,
            systemd_version: 252,
        };
        let text = text(Path::new("/usr/bin/enginekit"), &pins(), policy).unwrap();
        assert!(text.contains(
            "ExecStart=\"/usr/bin/enginekit\" \"start\" \"Qwen/Qwen2.5-0.5B@0123456789abcdef0123456789abcdef01234567\" \"--engine\" \"vllm\" \"--name\" \"qwen\" \"--gpu\" \"GPU-9c2f1a7e-3b4d-4c5e-8f60-718293a4b5c6\" \"--port\" \"41234\" \"--context\" \"8192\" \"--timeout\" \"600\" \"--pinned-image\" \"sha256:"
        ), "{text}");
        assert!(text.contains("RestartPreventExitStatus=78\n"), "{text}");
        assert!(text.contains("Environment=HF_HUB_OFFLINE=1\nEnvironment=\"HF_HUB_CACHE=/home/u/.cache/huggingface/hub\"\n"), "{text}");
        assert!(text.contains("Type=notify\n") && text.contains("WantedBy=default.target\n"));
        assert!(text.contains("StartLimitBurst=5\n") && text.contains("TimeoutStartSec=720\n"));
        // Debian 12's systemd 252 has no growing delay; trixie's 257 has.
        assert!(!text.contains("RestartSteps"), "{text}");
        let newer = super::text(
            Path::new("/usr/bin/enginekit"),
            &pins(),
            Policy {
                systemd_version: 257,
                ..policy
            },
        )
        .unwrap();
        assert!(
            newer.contains("RestartSteps=5\nRestartMaxDelaySec=300\n"),
            "{newer}"
        );
        // No token, no address beyond loopback, no user or root switch.
        for absent in ["TOKEN", "0.0.0.0", "User=", "Group="] {
            assert!(!text.contains(absent), "{absent}: {text}");
        }
    }

    #[test]
    fn paths_are_quoted_for_systemd_and_a_control_character_is_refused() {
        let mut p = pins();
        p.model = "/home/a b/100%/$HOME/\"q\"\\".to_owned();
        let text = text(
            Path::new("/usr/bin/enginekit"),
            &p,
            Policy {
                restarts: 1,
                systemd_version: 257,
            },
        )
        .unwrap();
        assert!(
            text.contains(" \"/home/a b/100%%/$$HOME/\\\"q\\\"\\\\\" "),
            "{text}"
        );
        p.model = "/home/a\nExecStartPre=/bin/evil".to_owned();
        assert_eq!(
            super::text(
                Path::new("/usr/bin/enginekit"),
                &p,
                Policy {
                    restarts: 1,
                    systemd_version: 257
                }
            ),
            None
        );
    }

    #[test]
    fn the_same_pins_give_the_same_bytes() {
        let policy = Policy {
            restarts: 3,
            systemd_version: 257,
        };
        let a = text(Path::new("/usr/bin/enginekit"), &pins(), policy);
        assert_eq!(a, text(Path::new("/usr/bin/enginekit"), &pins(), policy));
        assert_eq!(unit_name(&pins().name), "enginekit-model-qwen.service");
    }
}
