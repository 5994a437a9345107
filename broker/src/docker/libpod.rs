//! Podman's native (libpod) container create, the one call the broker does not make through the
//! Docker-compatible API when the daemon is Podman:
//! - Podman's compatible create ignores a `--gpus`-style request without a word (the container
//!   starts with no GPU) and honours a CDI device request only from 5.4; the native create takes
//!   CDI names as devices on every Podman the recipe installs (4.3 and later);
//! - rootless, the container's uids are the user's sub-IDs: the engine runs as the user only
//!   with `keep-id`, which the compatible create cannot ask for on every version.
//!
//! The body is the same `ContainerCreateBody` the broker sends Docker, translated field by
//! field. A field the translation does not know is refused, never dropped: a setting the broker
//! asked for (a capability drop, a read-only mount) must not vanish on the way.

use std::collections::BTreeMap;
use std::path::Path;

use bollard::models::ContainerCreateBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{json, Map, Value};

use super::error::{bounded, DockerError, Result};

/// The native API's path prefix; 4.0.0 is the oldest native API Podman 4 and 5 serve.
const API: &str = "/v4.0.0/libpod";
/// Longest answer read from a create call (an id and warnings).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The engine behind a socket, as its `/version` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Docker,
    /// Podman with its version (major, minor, patch).
    Podman((u32, u32, u32)),
}

impl EngineKind {
    /// From `/version`'s components: Podman names one of them "Podman Engine".
    pub(crate) fn from_version(version: &bollard::models::SystemVersion) -> EngineKind {
        let podman = version
            .components
            .iter()
            .flatten()
            .find(|c| c.name == "Podman Engine");
        match podman {
            Some(c) => EngineKind::Podman(parse_version(&c.version)),
            None => EngineKind::Docker,
        }
    }
}

/// `4.3.1`, `5.4.0-rc1` → (major, minor, patch); missing parts are 0.
fn parse_version(text: &str) -> (u32, u32, u32) {
    let mut parts = text.split(['.', '-', '+']).map(|p| p.parse().unwrap_or(0));
    let mut next = || parts.next().unwrap_or(0);
    (next(), next(), next())
}

fn refuse(reason: impl Into<String>) -> DockerError {
    DockerError::InvalidSpec {
        what: "container for Podman",
        reason: reason.into(),
    }
}

/// The native create's body (a SpecGenerator) for the container `name` that `body` describes.
pub(crate) fn spec_generator(name: &str, body: &ContainerCreateBody) -> Result<Value> {
    let mut from = as_object(body)?;
    let host = match from.remove("HostConfig") {
        Some(Value::Object(host)) => host,
        _ => Map::new(),
    };
    let mut spec = Map::new();
    spec.insert("name".into(), json!(name));
    // Rootless: the user's own uid inside is the user outside, so files in mounts stay theirs.
    spec.insert("userns".into(), json!({"nsmode": "keep-id"}));
    spec.insert("restart_policy".into(), json!("no"));
    for (key, value) in from {
        match key.as_str() {
            "Image" => spec.insert("image".into(), value),
            "User" => spec.insert("user".into(), value),
            "Entrypoint" => spec.insert("entrypoint".into(), value),
            "Cmd" => spec.insert("command".into(), value),
            "Labels" => spec.insert("labels".into(), value),
            "Env" => spec.insert("env".into(), env_map(&value)?),
            // Podman exposes what it publishes.
            "ExposedPorts" => None,
            other => {
                return Err(refuse(format!(
                    "the create field {other} is not translated"
                )))
            }
        };
    }
    let mut mounts = Vec::new();
    for (key, value) in host {
        match key.as_str() {
            "Binds" => mounts.extend(binds(&value)?),
            "Tmpfs" => mounts.extend(tmpfs(&value)?),
            "PortBindings" => {
                spec.insert("portmappings".into(), port_mappings(&value)?);
            }
            "NetworkMode" => {
                let mode = value.as_str().unwrap_or_default();
                // Docker's engine network exists to keep containers apart (no inter-container
                // traffic). Rootless Podman gives each container a network stack of its own
                // (slirp4netns on 4.x, pasta on 5.x) that reaches others only through the host's
                // published loopback ports; its networks have no such switch. So: that default.
                match mode {
                    "none" => {
                        spec.insert("netns".into(), json!({"nsmode": "none"}));
                    }
                    "" | "host" | "default" | "bridge" => {
                        return Err(refuse(format!("the network {mode:?} is not translated")))
                    }
                    named if named.contains(':') => {
                        return Err(refuse(format!("the network {named:?} is not translated")))
                    }
                    _ => {}
                }
            }
            "CapDrop" => {
                spec.insert("cap_drop".into(), value);
            }
            "SecurityOpt" => match value.as_array().map(Vec::as_slice) {
                Some([one]) if one == "no-new-privileges" => {
                    spec.insert("no_new_privileges".into(), json!(true));
                }
                _ => {
                    return Err(refuse(format!(
                        "the security options {value} are not translated"
                    )))
                }
            },
            "PidsLimit" => {
                spec.insert("resource_limits".into(), json!({"pids": {"limit": value}}));
            }
            "ShmSize" => {
                spec.insert("shm_size".into(), value);
            }
            "DeviceRequests" => {
                spec.insert("devices".into(), cdi_devices(&value)?);
            }
            "IpcMode" if value == "private" => {
                spec.insert("ipcns".into(), json!({"nsmode": "private"}));
            }
            "ReadonlyRootfs" => {
                spec.insert("read_only_filesystem".into(), value);
            }
            "LogConfig" => {
                spec.insert("log_configuration".into(), log_configuration(&value)?);
            }
            "RestartPolicy" if value["Name"] == "no" => {}
            "AutoRemove" | "Privileged" if value == false => {}
            other => {
                return Err(refuse(format!(
                    "the host setting {other}={value} is not translated"
                )))
            }
        }
    }
    spec.insert("mounts".into(), Value::Array(mounts));
    Ok(Value::Object(spec))
}

/// The body as its JSON object, without the fields it leaves unset.
fn as_object(body: &ContainerCreateBody) -> Result<Map<String, Value>> {
    let value = serde_json::to_value(body).map_err(|e| refuse(e.to_string()))?;
    let Value::Object(mut map) = value else {
        return Err(refuse("the create body is not an object"));
    };
    map.retain(|_, v| !v.is_null());
    if let Some(Value::Object(host)) = map.get_mut("HostConfig") {
        host.retain(|_, v| !v.is_null());
    }
    Ok(map)
}

fn env_map(value: &Value) -> Result<Value> {
    let mut out = BTreeMap::new();
    for entry in value.as_array().into_iter().flatten() {
        let Some((key, value)) = entry.as_str().and_then(|e| e.split_once('=')) else {
            return Err(refuse("an environment entry is not KEY=VALUE"));
        };
        out.insert(key.to_owned(), value.to_owned());
    }
    Ok(json!(out))
}

/// Docker's `source:target[:options]` binds (the spec checked both paths: absolute, no `:`).
fn binds(value: &Value) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for bind in value.as_array().into_iter().flatten() {
        let text = bind.as_str().unwrap_or_default();
        let mut parts = text.splitn(3, ':');
        let (Some(source), Some(target)) = (parts.next(), parts.next()) else {
            return Err(refuse(format!("the bind {text} is not source:target")));
        };
        let mut options: Vec<&str> = parts.next().unwrap_or("rw").split(',').collect();
        options.push("rbind");
        out.push(
            json!({"type": "bind", "source": source, "destination": target, "options": options}),
        );
    }
    Ok(out)
}

fn tmpfs(value: &Value) -> Result<Vec<Value>> {
    let Some(map) = value.as_object() else {
        return Err(refuse("the tmpfs setting is not a map"));
    };
    Ok(map
        .iter()
        .map(|(target, options)| {
            let options: Vec<&str> = options.as_str().unwrap_or_default().split(',').collect();
            json!({"type": "tmpfs", "source": "tmpfs", "destination": target, "options": options})
        })
        .collect())
}

/// `{"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}]}` → Podman's port mappings (host
/// port 0: Podman chooses one).
fn port_mappings(value: &Value) -> Result<Value> {
    let mut out = Vec::new();
    for (key, bindings) in value.as_object().into_iter().flatten() {
        let container_port = key
            .strip_suffix("/tcp")
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| refuse(format!("the port {key} is not a TCP port")))?;
        for binding in bindings.as_array().into_iter().flatten() {
            let host_ip = binding["HostIp"].as_str().unwrap_or_default();
            let host_port = match binding["HostPort"].as_str().unwrap_or_default() {
                "" => 0,
                p => p
                    .parse::<u16>()
                    .map_err(|_| refuse(format!("the host port {p} is not a port")))?,
            };
            out.push(json!({"host_ip": host_ip, "host_port": host_port,
                "container_port": container_port, "protocol": "tcp"}));
        }
    }
    Ok(Value::Array(out))
}

/// Only CDI requests go through: a `--gpus`-style request is the one Podman ignores silently.
fn cdi_devices(value: &Value) -> Result<Value> {
    let mut out = Vec::new();
    for request in value.as_array().into_iter().flatten() {
        if request["Driver"] != "cdi" {
            return Err(refuse(
                "Podman gives a container a GPU only through CDI; a --gpus request would start it without one",
            ));
        }
        for id in request["DeviceIDs"].as_array().into_iter().flatten() {
            out.push(json!({ "path": id }));
        }
    }
    Ok(Value::Array(out))
}

/// Docker's bounded json-file log → Podman's k8s-file log of the same size.
fn log_configuration(value: &Value) -> Result<Value> {
    let size = value["Config"]["max-size"].as_str().unwrap_or_default();
    let bytes = size
        .strip_suffix('m')
        .and_then(|m| m.parse::<u64>().ok())
        .map(|m| m * 1024 * 1024)
        .ok_or_else(|| refuse(format!("the log size {size} is not translated")))?;
    Ok(json!({"driver": "k8s-file", "size": bytes}))
}

/// Creates the container over the native API on `socket`; returns its id. An image Podman does
/// not have is `ImageAbsent`.
pub(crate) async fn create(socket: &Path, spec: &Value, image: &str) -> Result<String> {
    let shown = socket.display().to_string();
    let unreachable = |detail: String| DockerError::DaemonUnreachable {
        socket: shown.clone(),
        detail,
    };
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    tokio::spawn(connection);
    let request = hyper::Request::post(format!("{API}/containers/create"))
        .header(hyper::header::HOST, "podman")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(spec.to_string())))
        .map_err(|e| refuse(e.to_string()))?;
    let bad = |detail: String| DockerError::BadAnswer {
        what: "container create",
        detail: bounded(&detail),
    };
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    let status = response.status().as_u16();
    let bytes = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| bad(e.to_string()))?
        .to_bytes();
    let answer: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    match status {
        201 | 200 => answer["Id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("no Id in {answer}"))),
        404 => Err(DockerError::ImageAbsent {
            image: image.to_owned(),
        }),
        status => Err(DockerError::Api {
            what: "container create",
            status,
            detail: bounded(answer["message"].as_str().unwrap_or(&answer.to_string())),
        }),
    }
}

#[cfg(test)]
mod tests;
