//! `/etc/docker/daemon.json` → [`DaemonJson`].

use super::facts::DaemonJson;

/// Reads the parsed text of an existing daemon.json.
pub(crate) fn parse_daemon_json(text: &str) -> DaemonJson {
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return DaemonJson::Invalid {
                reason: e.to_string(),
            }
        }
    };
    let Some(object) = value.as_object() else {
        return DaemonJson::Invalid {
            reason: "the top level is not a JSON object".to_owned(),
        };
    };
    let nvidia_runtime = object
        .get("runtimes")
        .and_then(|r| r.as_object())
        .is_some_and(|r| r.contains_key("nvidia"));
    let bip = object
        .get("bip")
        .and_then(|b| b.as_str())
        .is_some_and(|b| !b.trim().is_empty());
    let pools = object
        .get("default-address-pools")
        .and_then(|p| p.as_array())
        .is_some_and(|p| !p.is_empty());
    DaemonJson::Parsed {
        nvidia_runtime,
        address_pools_configured: bip || pools,
    }
}

/// The state from a read attempt: `Ok(None)` is ENOENT.
pub(crate) fn daemon_json_from_read(read: Result<Option<String>, String>) -> DaemonJson {
    match read {
        Ok(None) => DaemonJson::Absent,
        Ok(Some(text)) => parse_daemon_json(&text),
        Err(reason) => DaemonJson::Unreadable { reason },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::Fact;

    fn parsed(nvidia: bool, pools: bool) -> DaemonJson {
        DaemonJson::Parsed {
            nvidia_runtime: nvidia,
            address_pools_configured: pools,
        }
    }

    #[test]
    fn nvidia_runtime_three_ways() {
        assert_eq!(
            parse_daemon_json(
                r#"{"runtimes":{"nvidia":{"path":"nvidia-container-runtime","args":[]}}}"#
            ),
            parsed(true, false)
        );
        assert_eq!(parse_daemon_json("{}"), parsed(false, false));
        assert_eq!(daemon_json_from_read(Ok(None)), DaemonJson::Absent);
    }

    #[test]
    fn a_read_error_is_unreadable_never_not_configured() {
        let s = daemon_json_from_read(Err("Permission denied (os error 13)".to_owned()));
        assert!(s.is_unreadable());
        assert!(s.address_pools_configured().is_unknown());
    }

    #[test]
    fn address_pools() {
        assert_eq!(
            parse_daemon_json(r#"{"bip":"10.200.0.1/24"}"#),
            parsed(false, true)
        );
        assert_eq!(
            parse_daemon_json(r#"{"default-address-pools":[{"base":"10.201.0.0/16","size":24}]}"#),
            parsed(false, true)
        );
        assert_eq!(
            parse_daemon_json(r#"{"bip":"  ","default-address-pools":[]}"#),
            parsed(false, false)
        );
        let bad = parse_daemon_json("{not json");
        assert!(bad.is_unreadable());
        assert!(bad.address_pools_configured().is_unknown());
        assert!(parse_daemon_json("[1]").is_unreadable());
        assert_eq!(
            DaemonJson::Absent.address_pools_configured(),
            Fact::known(false)
        );
    }
}
