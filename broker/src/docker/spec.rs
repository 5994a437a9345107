//! The typed container spec and its translation into an Engine API create body.
//!
//! The posture is not configurable: image by digest (create never pulls), at most one GPU by
//! UUID, bind mounts validated and realpath-ed (never the Docker socket or a parent of it;
//! SELinux `:z` only inside the data root), the invoking uid:gid, every capability dropped,
//! `no-new-privileges`, a pids limit, no restart, a dedicated network with inter-container
//! traffic off, and a port published on 127.0.0.1 only.

use enginekit_shared::wire::plan::GpuAccess;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use bollard::models::{
    ContainerCreateBody, DeviceRequest, HostConfig, HostConfigLogConfig, PortBinding,
    RestartPolicy, RestartPolicyNameEnum,
};
use enginekit_shared::image::ImageRef;

use super::error::{DockerError, Result};
use super::names::{validate_label_value, BadValue, ContainerName, InstanceId};

/// Label naming the owner of every container and network the broker creates.
pub(crate) const LABEL_OWNER: &str = "org.enginekit.owner";
/// The owner label's value.
pub(crate) const OWNER: &str = "enginekit";
/// Label carrying the creating broker instance.
pub(crate) const LABEL_INSTANCE: &str = "org.enginekit.instance";
/// Label carrying the engine id.
pub(crate) const LABEL_ENGINE: &str = "org.enginekit.engine";

/// The only host address a port is ever published on.
pub(crate) const LOOPBACK: &str = "127.0.0.1";
/// Largest shared-memory size accepted.
pub(crate) const MAX_SHM_BYTES: u64 = 16 << 30;
/// Default shared-memory size (a placeholder, as in the reference).
pub(crate) const DEFAULT_SHM_BYTES: u64 = 2 << 30;

/// `/dev/shm` for an engine on `cards` cards: the default for one, [`DEFAULT_SHM_BYTES`] per card
/// for a tensor-parallel group, at most [`MAX_SHM_BYTES`].
///
/// vLLM's Docker docs ask for `--ipc=host` or a large `--shm-size`: PyTorch and NCCL pass data
/// between the ranks' processes through shared memory, and Docker's 64 MiB default fails with
/// "No space left on device" on `/dev/shm/nccl-*`. All ranks run in this one container, so a
/// private IPC namespace with a bounded tmpfs serves them; `--ipc=host` would instead open the
/// host's SysV segments and `/dev/shm` to the engine (and the engine's to the host), and its
/// writes there would not count against the container. So: a bounded `ShmSize`, never host IPC.
pub(crate) fn shm_bytes_for(cards: usize) -> u64 {
    let cards = u64::try_from(cards.max(1)).unwrap_or(u64::MAX);
    DEFAULT_SHM_BYTES.saturating_mul(cards).min(MAX_SHM_BYTES)
}
/// Default process limit inside an engine container.
pub(crate) const DEFAULT_PIDS_LIMIT: i64 = 4096;
/// The network option that turns inter-container traffic off on a bridge.
pub(crate) const ICC_OPTION: &str = "com.docker.network.bridge.enable_icc";

/// Paths a bind mount may never expose: the Docker socket and what contains it.
const DOCKER_SOCKETS: &[&str] = &["/var/run/docker.sock", "/run/docker.sock"];
/// Kernel and device trees a mount may never expose.
const FORBIDDEN_TREES: &[&str] = &["/proc", "/sys", "/dev"];

fn invalid(what: &'static str, reason: impl Into<String>) -> DockerError {
    DockerError::InvalidSpec {
        what,
        reason: reason.into(),
    }
}

fn has_control(text: &str) -> bool {
    text.chars().any(|c| c.is_control())
}

/// One GPU by UUID: `GPU-` or `MIG-` followed by a canonical 8-4-4-4-12 hex UUID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GpuUuid(String);

impl GpuUuid {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for GpuUuid {
    type Err = DockerError;
    fn from_str(s: &str) -> Result<Self> {
        let uuid = s
            .strip_prefix("GPU-")
            .or_else(|| s.strip_prefix("MIG-"))
            .ok_or_else(|| invalid("GPU id", "must start with GPU- or MIG-"))?;
        let groups: Vec<&str> = uuid.split('-').collect();
        let lengths = [8, 4, 4, 4, 12];
        let ok = groups.len() == lengths.len()
            && groups
                .iter()
                .zip(lengths)
                .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
        if ok {
            Ok(GpuUuid(s.to_owned()))
        } else {
            Err(invalid("GPU id", "not a GPU-/MIG- UUID (8-4-4-4-12 hex)"))
        }
    }
}

enginekit_shared::string_newtype!(GpuUuid);

/// A Docker network the broker owns: same grammar as container names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetworkName(ContainerName);

impl NetworkName {
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl FromStr for NetworkName {
    type Err = DockerError;
    fn from_str(s: &str) -> Result<Self> {
        let name: ContainerName = s
            .parse()
            .map_err(|e: BadValue| invalid("network name", e.reason))?;
        if matches!(s, "bridge" | "host" | "none" | "default") {
            return Err(invalid(
                "network name",
                "a built-in network is not a dedicated one",
            ));
        }
        Ok(NetworkName(name))
    }
}

/// `uid:gid` the container runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserIds {
    pub uid: u32,
    pub gid: u32,
}

impl UserIds {
    /// The invoking user (the broker's own real ids): caches it writes stay removable.
    pub(crate) fn current() -> UserIds {
        UserIds {
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
        }
    }
}

/// A path inside the container: absolute, normal components only, no `:` or `,`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPath(String);

impl ContainerPath {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ContainerPath {
    type Err = DockerError;
    fn from_str(s: &str) -> Result<Self> {
        let path = Path::new(s);
        if !path.is_absolute() || s == "/" {
            return Err(invalid("mount target", "must be an absolute path below /"));
        }
        if s.contains([':', ',']) || has_control(s) {
            return Err(invalid(
                "mount target",
                "must not contain ':', ',' or control characters",
            ));
        }
        if path
            .components()
            .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
        {
            return Err(invalid("mount target", "must not contain '.' or '..'"));
        }
        Ok(ContainerPath(s.to_owned()))
    }
}

/// One bind mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountSpec {
    /// What the mount is for, named in errors (`model`, `engine-cache`, …).
    pub purpose: String,
    pub source: PathBuf,
    pub target: ContainerPath,
    pub read_only: bool,
}

/// The one published port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSpec {
    /// The port the engine listens on inside the container (1..=65535).
    pub container_port: u16,
    /// The host port on 127.0.0.1; 0 lets Docker choose.
    pub host_port: u16,
}

/// An environment entry: `KEY` as an identifier, the value free of NUL/CR/LF (a leading `-`
/// is fine: `TEMPERATURE=-0.5`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvVar {
    key: String,
    value: String,
}

impl EnvVar {
    pub(crate) fn new(key: &str, value: &str) -> Result<EnvVar> {
        let mut chars = key.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
            return Err(invalid(
                "environment key",
                "must match [A-Za-z_][A-Za-z0-9_.-]*",
            ));
        }
        if value.contains(['\0', '\r', '\n']) {
            return Err(invalid(
                "environment value",
                "must not contain NUL, CR or LF",
            ));
        }
        Ok(EnvVar {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }

    fn entry(&self) -> String {
        format!("{}={}", self.key, self.value)
    }
}

/// SELinux relabelling: `:z` on every mount, allowed only inside `data_root`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selinux {
    pub(crate) data_root: PathBuf,
}

/// Everything needed to create one engine container.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub name: ContainerName,
    pub(crate) engine: String,
    pub(crate) instance: InstanceId,
    pub image: ImageRef,
    /// The cards the container gets: none, one, or a tensor-parallel group.
    pub gpus: Vec<GpuUuid>,
    /// How `gpus` are asked for.
    pub gpu_access: GpuAccess,
    pub mounts: Vec<MountSpec>,
    pub(crate) selinux: Option<Selinux>,
    pub user: UserIds,
    pub(crate) env: Vec<EnvVar>,
    /// Replaces the image's entrypoint when given.
    pub entrypoint: Option<Vec<String>>,
    /// Command words after the image (a leading `-` is fine: Docker never parses them).
    pub command: Vec<String>,
    pub port: Option<PortSpec>,
    pub network: NetworkName,
    pub(crate) shm_bytes: u64,
    pub(crate) pids_limit: i64,
    /// Root filesystem read-only, with a private tmpfs on /tmp.
    pub read_only_root: bool,
}

impl ContainerSpec {
    /// A spec with the fixed defaults; fill in mounts, env, command and port as needed.
    pub fn new(
        name: ContainerName,
        engine: &str,
        instance: InstanceId,
        image: ImageRef,
        network: NetworkName,
    ) -> ContainerSpec {
        ContainerSpec {
            name,
            engine: engine.to_owned(),
            instance,
            image,
            gpus: Vec::new(),
            gpu_access: GpuAccess::default(),
            mounts: Vec::new(),
            selinux: None,
            user: UserIds::current(),
            env: Vec::new(),
            entrypoint: None,
            command: Vec::new(),
            port: None,
            network,
            shm_bytes: DEFAULT_SHM_BYTES,
            pids_limit: DEFAULT_PIDS_LIMIT,
            read_only_root: false,
        }
    }

    /// The labels every container of this spec carries (discovery only, never authority).
    pub(crate) fn labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_OWNER.to_owned(), OWNER.to_owned()),
            (LABEL_INSTANCE.to_owned(), self.instance.to_string()),
            (LABEL_ENGINE.to_owned(), self.engine.clone()),
        ])
    }

    /// Validates everything, resolves mount sources through the filesystem, and builds the
    /// create body. Nothing is sent to Docker here.
    pub(crate) fn to_create_body(&self) -> Result<ContainerCreateBody> {
        validate_label_value("engine id", &self.engine)
            .map_err(|e| invalid("engine id", e.reason))?;
        if self.shm_bytes == 0 || self.shm_bytes > MAX_SHM_BYTES {
            return Err(invalid("shm size", "must be between 1 byte and 16 GiB"));
        }
        if self.pids_limit <= 0 {
            return Err(invalid("pids limit", "must be positive"));
        }
        for word in self.command.iter().chain(self.entrypoint.iter().flatten()) {
            if word.is_empty() || has_control(word) {
                return Err(invalid(
                    "command word",
                    "must be non-empty without control characters",
                ));
            }
        }
        let binds = resolve_binds(&self.mounts, self.selinux.as_ref())?;

        let mut exposed = Vec::new();
        let mut bindings = HashMap::new();
        if let Some(port) = self.port {
            if port.container_port == 0 {
                return Err(invalid("container port", "must be 1..65535"));
            }
            let key = format!("{}/tcp", port.container_port);
            exposed.push(key.clone());
            let host_port = match port.host_port {
                0 => String::new(),
                p => p.to_string(),
            };
            bindings.insert(
                key,
                Some(vec![PortBinding {
                    host_ip: Some(LOOPBACK.to_owned()),
                    host_port: Some(host_port),
                }]),
            );
        }

        let device_requests =
            (!self.gpus.is_empty()).then(|| vec![gpu_request(&self.gpus, self.gpu_access)]);
        let (readonly_rootfs, tmpfs) = if self.read_only_root {
            (
                Some(true),
                Some(HashMap::from([(
                    "/tmp".to_owned(),
                    "rw,nosuid,nodev,size=1g".to_owned(),
                )])),
            )
        } else {
            (None, None)
        };

        let host_config = HostConfig {
            binds: Some(binds),
            port_bindings: Some(bindings),
            network_mode: Some(self.network.as_str().to_owned()),
            cap_drop: Some(vec!["ALL".to_owned()]),
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            pids_limit: Some(self.pids_limit),
            shm_size: i64::try_from(self.shm_bytes).ok(),
            device_requests,
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            auto_remove: Some(false),
            privileged: Some(false),
            ipc_mode: Some("private".to_owned()),
            readonly_rootfs,
            tmpfs,
            log_config: Some(bounded_json_log()),
            ..HostConfig::default()
        };
        Ok(ContainerCreateBody {
            image: Some(self.image.to_string()),
            user: Some(format!("{}:{}", self.user.uid, self.user.gid)),
            env: Some(self.env.iter().map(EnvVar::entry).collect()),
            entrypoint: self.entrypoint.clone(),
            cmd: (!self.command.is_empty()).then(|| self.command.clone()),
            labels: Some(self.labels()),
            exposed_ports: (!exposed.is_empty()).then_some(exposed),
            host_config: Some(host_config),
            ..ContainerCreateBody::default()
        })
    }
}

/// Exactly those cards: `--gpus '"device=<uuid>,<uuid>"'`, or by CDI `--device
/// nvidia.com/gpu=<uuid>` per card (what the docker CLI sends for CDI names: one request of the
/// `cdi` driver with every qualified name).
pub(crate) fn gpu_request(gpus: &[GpuUuid], access: GpuAccess) -> DeviceRequest {
    match access {
        GpuAccess::GpusFlag => DeviceRequest {
            driver: Some(String::new()),
            count: Some(0),
            device_ids: Some(gpus.iter().map(|g| g.as_str().to_owned()).collect()),
            capabilities: Some(vec![vec!["gpu".to_owned()]]),
            options: None,
        },
        GpuAccess::Cdi => DeviceRequest {
            driver: Some("cdi".to_owned()),
            count: None,
            device_ids: Some(gpus.iter().map(|g| format!("nvidia.com/gpu={g}")).collect()),
            capabilities: None,
            options: None,
        },
    }
}

/// json-file logs with a size cap, so a chatty engine cannot fill the disk.
pub(crate) fn bounded_json_log() -> HostConfigLogConfig {
    HostConfigLogConfig {
        typ: Some("json-file".to_owned()),
        config: Some(HashMap::from([
            ("max-size".to_owned(), "50m".to_owned()),
            ("max-file".to_owned(), "2".to_owned()),
        ])),
    }
}

/// Lexical checks on a source before and after resolution.
fn check_source_text(purpose: &str, path: &Path) -> Result<()> {
    let Some(text) = path.to_str() else {
        return Err(invalid(
            "mount source",
            format!("the {purpose} mount source is not UTF-8"),
        ));
    };
    if !path.is_absolute() {
        return Err(invalid(
            "mount source",
            format!("the {purpose} mount source must be absolute"),
        ));
    }
    if text.contains([':', ',']) || has_control(text) {
        return Err(invalid(
            "mount source",
            format!("the {purpose} mount source must not contain ':', ',' or control characters"),
        ));
    }
    Ok(())
}

/// Realpaths every source (and the SELinux data root), then applies the rules to what is
/// really mounted, so a symlink pointing elsewhere is judged by its target.
fn resolve_binds(mounts: &[MountSpec], selinux: Option<&Selinux>) -> Result<Vec<String>> {
    let data_root = match selinux {
        None => None,
        Some(s) => {
            check_source_text("data root", &s.data_root)?;
            Some(
                std::fs::canonicalize(&s.data_root).map_err(|e| DockerError::MountUnresolved {
                    which: "data root".to_owned(),
                    path: s.data_root.display().to_string(),
                    detail: e.to_string(),
                })?,
            )
        }
    };
    let sockets: Vec<PathBuf> = DOCKER_SOCKETS
        .iter()
        .map(PathBuf::from)
        .chain(
            DOCKER_SOCKETS
                .iter()
                .filter_map(|s| std::fs::canonicalize(s).ok()),
        )
        .collect();
    let mut targets = std::collections::HashSet::new();
    let mut binds = Vec::with_capacity(mounts.len());
    for mount in mounts {
        let purpose = mount.purpose.as_str();
        check_source_text(purpose, &mount.source)?;
        let real =
            std::fs::canonicalize(&mount.source).map_err(|e| DockerError::MountUnresolved {
                which: purpose.to_owned(),
                path: mount.source.display().to_string(),
                detail: e.to_string(),
            })?;
        check_source_text(purpose, &real)?;
        if real == Path::new("/") || sockets.iter().any(|s| s.starts_with(&real)) {
            return Err(invalid(
                "mount source",
                format!(
                    "the {purpose} mount source is the Docker socket or a folder containing it"
                ),
            ));
        }
        if FORBIDDEN_TREES.iter().any(|t| real.starts_with(t)) {
            return Err(invalid(
                "mount source",
                format!("the {purpose} mount source is inside /proc, /sys or /dev"),
            ));
        }
        if let Some(root) = &data_root {
            if !real.starts_with(root) {
                return Err(invalid(
                    "mount source",
                    format!(
                        "the {purpose} mount source {} is outside the data folder {}; SELinux relabelling is only done there. Move it into the data folder or `mount --bind` it there",
                        real.display(),
                        root.display()
                    ),
                ));
            }
        }
        if !targets.insert(mount.target.as_str()) {
            return Err(invalid(
                "mount target",
                format!("{} is mounted twice", mount.target.as_str()),
            ));
        }
        let mut options = vec![if mount.read_only { "ro" } else { "rw" }];
        if data_root.is_some() {
            options.push("z");
        }
        binds.push(format!(
            "{}:{}:{}",
            real.display(),
            mount.target.as_str(),
            options.join(",")
        ));
    }
    Ok(binds)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ContainerSpec {
        ContainerSpec::new(
            "ekt-test".parse().unwrap(),
            "vllm",
            InstanceId::generate().unwrap(),
            ImageRef::parse(&format!("127.0.0.1:5000/x@sha256:{}", "2".repeat(64))).unwrap(),
            "ekt-net".parse().unwrap(),
        )
    }

    /// The `-v` binds Docker would be given for `s`.
    fn binds_of(s: &ContainerSpec) -> Vec<String> {
        s.to_create_body()
            .unwrap()
            .host_config
            .unwrap()
            .binds
            .unwrap()
    }

    fn mount(purpose: &str, source: &Path, target: &str, read_only: bool) -> MountSpec {
        MountSpec {
            purpose: purpose.into(),
            source: source.to_path_buf(),
            target: target.parse().unwrap(),
            read_only,
        }
    }

    #[test]
    fn gpu_ids_are_strict_uuids() {
        assert!("GPU-0123abcd-0000-1111-2222-333344445555"
            .parse::<GpuUuid>()
            .is_ok());
        assert!("MIG-0123abcd-0000-1111-2222-333344445555"
            .parse::<GpuUuid>()
            .is_ok());
        for bad in [
            "GPU-1,--privileged",
            "GPU-",
            "0",
            "gpu-0123abcd-0000-1111-2222-333344445555",
            "GPU-0123abcd-0000-1111-2222-33334444555g",
        ] {
            assert!(bad.parse::<GpuUuid>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_gpu_is_asked_for_by_the_gpus_flag_or_by_its_cdi_name() {
        let uuid: GpuUuid = "GPU-0123abcd-0000-1111-2222-333344445555".parse().unwrap();
        let flag = gpu_request(std::slice::from_ref(&uuid), GpuAccess::GpusFlag);
        assert_eq!(flag.driver.as_deref(), Some(""));
        assert_eq!(flag.device_ids, Some(vec![uuid.to_string()]));
        assert_eq!(flag.capabilities, Some(vec![vec!["gpu".to_owned()]]));
        let cdi = gpu_request(std::slice::from_ref(&uuid), GpuAccess::Cdi);
        assert_eq!(cdi.driver.as_deref(), Some("cdi"));
        assert_eq!(cdi.device_ids, Some(vec![format!("nvidia.com/gpu={uuid}")]));
        assert_eq!(cdi.capabilities, None);
        assert_eq!(cdi.count, None);
        let mut s = spec();
        s.gpus = vec![uuid];
        s.gpu_access = GpuAccess::Cdi;
        let host = s.to_create_body().unwrap().host_config.unwrap();
        assert_eq!(host.device_requests, Some(vec![cdi]));
        let none = spec().to_create_body().unwrap().host_config.unwrap();
        assert_eq!(none.device_requests, None);
    }

    #[test]
    fn a_tensor_parallel_group_gets_its_cards_in_one_request_and_a_bounded_private_shm() {
        let group: Vec<GpuUuid> = [
            "GPU-11111111-0000-0000-0000-000000000000",
            "GPU-22222222-0000-0000-0000-000000000000",
        ]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
        for (access, ids) in [
            (
                GpuAccess::GpusFlag,
                vec![group[0].to_string(), group[1].to_string()],
            ),
            (
                GpuAccess::Cdi,
                vec![
                    format!("nvidia.com/gpu={}", group[0]),
                    format!("nvidia.com/gpu={}", group[1]),
                ],
            ),
        ] {
            let mut s = spec();
            s.gpus = group.clone();
            s.gpu_access = access;
            s.shm_bytes = shm_bytes_for(group.len());
            let host = s.to_create_body().unwrap().host_config.unwrap();
            let requests = host.device_requests.unwrap();
            assert_eq!(requests.len(), 1, "{access:?}");
            assert_eq!(requests[0].device_ids, Some(ids), "{access:?}");
            // 2 GiB per rank, in the container's own IPC namespace.
            assert_eq!(host.shm_size, Some(4 << 30));
            assert_eq!(host.ipc_mode.as_deref(), Some("private"));
        }
        assert_eq!(shm_bytes_for(0), DEFAULT_SHM_BYTES);
        assert_eq!(shm_bytes_for(1), DEFAULT_SHM_BYTES);
        assert_eq!(shm_bytes_for(8), MAX_SHM_BYTES);
        assert_eq!(shm_bytes_for(usize::MAX), MAX_SHM_BYTES);
    }

    #[test]
    fn the_posture_is_fixed() {
        let mut s = spec();
        s.gpus = vec!["GPU-0123abcd-0000-1111-2222-333344445555".parse().unwrap()];
        s.port = Some(PortSpec {
            container_port: 8000,
            host_port: 0,
        });
        s.user = UserIds {
            uid: 1000,
            gid: 1001,
        };
        let body = s.to_create_body().unwrap();
        let host = body.host_config.unwrap();
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
        assert_eq!(
            host.security_opt,
            Some(vec!["no-new-privileges".to_owned()])
        );
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.pids_limit, Some(DEFAULT_PIDS_LIMIT));
        assert_eq!(host.network_mode.as_deref(), Some("ekt-net"));
        assert_eq!(body.user.as_deref(), Some("1000:1001"));
        let binding = &host.port_bindings.unwrap()["8000/tcp"];
        assert_eq!(
            binding.as_ref().unwrap()[0].host_ip.as_deref(),
            Some(LOOPBACK)
        );
        let gpu = &host.device_requests.unwrap()[0];
        assert_eq!(
            gpu.device_ids,
            Some(vec!["GPU-0123abcd-0000-1111-2222-333344445555".to_owned()])
        );
        assert_eq!(body.image.unwrap(), s.image.to_string());
        assert_eq!(body.labels.unwrap()[LABEL_OWNER], OWNER);
        let text = serde_json::to_string(&ContainerCreateBody {
            host_config: None,
            ..Default::default()
        })
        .unwrap();
        assert!(!text.contains("docker.sock"));
    }

    #[test]
    fn mounts_are_resolved_and_the_socket_and_its_parents_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model");
        std::fs::create_dir(&model).unwrap();
        let mut s = spec();
        s.mounts = vec![mount("model", &model, "/enginekit/model", true)];
        let binds = binds_of(&s);
        let real = std::fs::canonicalize(&model).unwrap();
        assert_eq!(
            binds,
            vec![format!("{}:/enginekit/model:ro", real.display())]
        );

        for bad in [
            "/var/run/docker.sock",
            "/run",
            "/var/run",
            "/",
            "/var",
            "/proc/self",
            "relative/x",
        ] {
            let mut s = spec();
            s.mounts = vec![MountSpec {
                purpose: "m".into(),
                source: PathBuf::from(bad),
                target: "/m".parse().unwrap(),
                read_only: true,
            }];
            assert!(s.to_create_body().is_err(), "{bad} accepted");
        }
        let mut s = spec();
        s.mounts = vec![mount("model", &dir.path().join("missing"), "/m", true)];
        assert!(matches!(
            s.to_create_body(),
            Err(DockerError::MountUnresolved { .. })
        ));
        let mut s = spec();
        s.mounts = vec![MountSpec {
            purpose: "m".into(),
            source: PathBuf::from("/tmp/a:b"),
            target: "/m".parse().unwrap(),
            read_only: true,
        }];
        assert!(matches!(
            s.to_create_body(),
            Err(DockerError::InvalidSpec { .. })
        ));
    }

    #[test]
    fn selinux_relabels_only_inside_the_data_root_and_symlinks_are_judged_by_target() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("view");
        let sibling = dir.path().join("viewer");
        std::fs::create_dir_all(root.join("models")).unwrap();
        std::fs::create_dir_all(&sibling).unwrap();
        std::os::unix::fs::symlink(&sibling, root.join("escape")).unwrap();
        std::os::unix::fs::symlink(root.join("models"), root.join("inside")).unwrap();
        let selinux = Some(Selinux {
            data_root: root.clone(),
        });

        let mut s = spec();
        s.selinux = selinux.clone();
        s.mounts = vec![
            mount("model", &root.join("inside"), "/m", true),
            mount("root", &root, "/r", false),
        ];
        let binds = binds_of(&s);
        assert!(binds[0].ends_with("/view/models:/m:ro,z"), "{binds:?}");
        assert!(binds[1].ends_with(":/r:rw,z"));

        for outside in [sibling.clone(), root.join("escape")] {
            let mut s = spec();
            s.selinux = selinux.clone();
            s.mounts = vec![mount("model", &outside, "/m", true)];
            assert!(
                matches!(s.to_create_body(), Err(DockerError::InvalidSpec { .. })),
                "{outside:?}"
            );
        }
    }

    #[test]
    fn bad_values_are_refused_before_docker() {
        assert!(EnvVar::new("1BAD", "x").is_err());
        assert!(EnvVar::new("OK", "a\nb").is_err());
        assert!(EnvVar::new("TEMPERATURE", "-0.5").is_ok());
        for bad in ["relative", "/", "/a/../b", "/a:b", "/a,b"] {
            assert!(bad.parse::<ContainerPath>().is_err(), "{bad}");
        }
        assert!("bridge".parse::<NetworkName>().is_err());
        let mut s = spec();
        s.shm_bytes = MAX_SHM_BYTES + 1;
        assert!(s.to_create_body().is_err());
        s.shm_bytes = MAX_SHM_BYTES;
        assert!(s.to_create_body().is_ok());
        s.command = vec!["ok".into(), "bad\u{0}".into()];
        assert!(s.to_create_body().is_err());
        s.command = vec!["--leading-dash-is-fine".into()];
        assert!(s.to_create_body().is_ok());
        s.engine = "has space".into();
        assert!(s.to_create_body().is_err());
    }
}
