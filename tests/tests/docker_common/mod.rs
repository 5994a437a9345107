//! Fixtures for the Docker integration tests (and the pull benchmark, which includes this file):
//! images built here from generated files as `docker save` archives, loaded and pushed to the
//! bench registry over the Engine API; a throttling/stalling TCP proxy in front of the registry;
//! unique `ekt-docker-` names; cleanup.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::{
    ImportImageOptionsBuilder, PushImageOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder,
};
use futures_util::StreamExt;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub(crate) const SOCKET: &str = "/var/run/docker.sock";
pub(crate) const REGISTRY: &str = "127.0.0.1:5000";

/// Fails (never skips) with a clear message when dockerd or the registry is not there.
pub(crate) async fn require_services() -> bollard::Docker {
    let api = bollard::Docker::connect_with_unix(SOCKET, 120, bollard::API_DEFAULT_VERSION)
        .unwrap_or_else(|e| panic!("dockerd is required at {SOCKET} (run tests/bench/up): {e}"));
    let api = api.negotiate_version().await.unwrap_or_else(|e| {
        panic!("dockerd does not answer at {SOCKET} (run tests/bench/up): {e}")
    });
    if TcpStream::connect(REGISTRY).await.is_err() {
        panic!("the registry is required at {REGISTRY} (run tests/bench/up)");
    }
    api
}

/// `ekt-docker-<what>-<8 random hex>`.
pub(crate) fn unique(what: &str) -> String {
    let mut raw = [0u8; 4];
    getrandom::fill(&mut raw).unwrap();
    format!("ekt-docker-{what}-{}", hex::encode(raw))
}

/// Fast incompressible bytes (xorshift seeded from the OS).
pub(crate) fn random_bytes(len: usize) -> Vec<u8> {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).unwrap();
    let mut x = u64::from_le_bytes(seed) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// One file in a layer.
pub(crate) enum Entry {
    File {
        path: String,
        bytes: Vec<u8>,
        mode: u32,
    },
    Symlink {
        path: String,
        target: String,
    },
    Dir {
        path: String,
    },
}

/// A layer tarball from entries.
pub(crate) fn layer_tar(entries: &[Entry]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(1_700_000_000);
        header.set_uid(0);
        header.set_gid(0);
        match entry {
            Entry::File { path, bytes, mode } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                header.set_mode(*mode);
                builder
                    .append_data(&mut header, path, bytes.as_slice())
                    .unwrap();
            }
            Entry::Symlink { path, target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                header.set_mode(0o777);
                builder.append_link(&mut header, path, target).unwrap();
            }
            Entry::Dir { path } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                header.set_mode(0o755);
                builder
                    .append_data(&mut header, path, std::io::empty())
                    .unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A `docker save`-format archive of an image made of `layers`, tagged `repo_tag`.
pub(crate) fn image_archive(layers: &[Vec<u8>], repo_tag: &str, cmd: &[&str]) -> Vec<u8> {
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| format!("sha256:{}", sha256_hex(l)))
        .collect();
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Env": ["PATH=/bin"], "Cmd": cmd },
        "rootfs": { "type": "layers", "diff_ids": diff_ids },
        "history": layers.iter().map(|_| serde_json::json!({"created_by": "enginekit test fixture"})).collect::<Vec<_>>(),
    });
    let config_bytes = serde_json::to_vec(&config).unwrap();
    let config_name = format!("{}.json", sha256_hex(&config_bytes));
    let layer_names: Vec<String> = layers
        .iter()
        .map(|l| format!("{}/layer.tar", sha256_hex(l)))
        .collect();
    let manifest = serde_json::json!([{ "Config": config_name, "RepoTags": [repo_tag], "Layers": layer_names }]);
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |name: &str, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(1_700_000_000);
        builder.append_data(&mut header, name, bytes).unwrap();
    };
    add(&config_name, &config_bytes);
    for (name, layer) in layer_names.iter().zip(layers) {
        add(name, layer);
    }
    add("manifest.json", &serde_json::to_vec(&manifest).unwrap());
    builder.into_inner().unwrap()
}

/// Loads an archive into dockerd.
pub(crate) async fn load(api: &bollard::Docker, archive: Vec<u8>) {
    let options = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut stream = api.import_image(options, bollard::body_full(archive.into()), None);
    while let Some(item) = stream.next().await {
        item.expect("docker load of a fixture image");
    }
}

/// Pushes `repo:tag` to the registry and returns the `repo@sha256:…` it is known by there.
pub(crate) async fn push(api: &bollard::Docker, repo: &str, tag: &str) -> String {
    let options = PushImageOptionsBuilder::new().tag(tag).build();
    let credentials = bollard::auth::DockerCredentials::default();
    let mut stream = api.push_image(repo, Some(options), Some(credentials));
    while let Some(item) = stream.next().await {
        item.unwrap_or_else(|e| panic!("push of {repo}:{tag}: {e}"));
    }
    let inspect = api.inspect_image(&format!("{repo}:{tag}")).await.unwrap();
    inspect
        .repo_digests
        .unwrap_or_default()
        .into_iter()
        .find(|d| d.starts_with(&format!("{repo}@")))
        .unwrap_or_else(|| panic!("no repo digest for {repo} after the push"))
}

/// Removes an image and all its references (test fixtures only).
pub(crate) async fn remove_image_fully(api: &bollard::Docker, name: &str) {
    let Ok(inspect) = api.inspect_image(name).await else {
        return;
    };
    let id = inspect.id.unwrap_or_default();
    let options = RemoveImageOptionsBuilder::new().force(true).build();
    let _ = api.remove_image(&id, Some(options), None).await;
}

/// Force-removes a container (test cleanup).
pub(crate) async fn remove_container(api: &bollard::Docker, id: &str) {
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = api.remove_container(id, Some(options)).await;
}

/// A multi-layer image of generated files, pushed to the registry and removed locally.
pub(crate) struct PushedImage {
    /// `127.0.0.1:5000/ekt-docker-…`
    pub repo: String,
    /// `repo@sha256:…`
    pub reference: String,
    /// Uncompressed bytes of all layers.
    pub layer_bytes: u64,
}

/// Builds an image from `layer_sizes` random files, pushes it, and removes it locally.
pub(crate) async fn pushed_random_image(
    api: &bollard::Docker,
    what: &str,
    layer_sizes: &[usize],
) -> PushedImage {
    let repo = format!("{REGISTRY}/{}", unique(what));
    let layers: Vec<Vec<u8>> = layer_sizes
        .iter()
        .enumerate()
        .map(|(i, size)| {
            layer_tar(&[Entry::File {
                path: format!("data/layer{i}.bin"),
                bytes: random_bytes(*size),
                mode: 0o644,
            }])
        })
        .collect();
    let layer_bytes = layers.iter().map(|l| l.len() as u64).sum();
    load(
        api,
        image_archive(&layers, &format!("{repo}:v1"), &["/bin/true"]),
    )
    .await;
    let reference = push(api, &repo, "v1").await;
    remove_image_fully(api, &format!("{repo}:v1")).await;
    PushedImage {
        repo,
        reference,
        layer_bytes,
    }
}

/// A busybox-static image (from the host's /bin/busybox), loaded locally and pushed, so it can
/// be used by digest. Returns `repo@sha256:…`.
pub(crate) async fn busybox_image(api: &bollard::Docker) -> String {
    let busybox = std::fs::read("/bin/busybox").expect(
        "busybox-static is required for the container tests (apt-get install busybox-static)",
    );
    let mut entries = vec![
        Entry::Dir { path: "bin".into() },
        Entry::Dir { path: "tmp".into() },
        Entry::Dir { path: "www".into() },
        Entry::File {
            path: "bin/busybox".into(),
            bytes: busybox,
            mode: 0o755,
        },
        Entry::File {
            path: "www/index.html".into(),
            bytes: b"ekt-docker ok\n".to_vec(),
            mode: 0o644,
        },
        // Unique content, so each test has its own image id and cleanup never hits another's.
        Entry::File {
            path: "etc-ekt-id".into(),
            bytes: unique("id").into_bytes(),
            mode: 0o644,
        },
    ];
    for applet in [
        "sh", "sleep", "nc", "wget", "httpd", "id", "cat", "true", "echo", "ls", "timeout",
    ] {
        entries.push(Entry::Symlink {
            path: format!("bin/{applet}"),
            target: "busybox".into(),
        });
    }
    let repo = format!("{REGISTRY}/{}", unique("busybox"));
    load(
        api,
        image_archive(&[layer_tar(&entries)], &format!("{repo}:v1"), &["/bin/sh"]),
    )
    .await;
    let reference = push(api, &repo, "v1").await;
    // Leave only the digest reference, as after a pull by digest.
    remove_image_fully(api, &format!("{repo}:v1")).await;
    raw_pull(api, &reference).await;
    reference
}

/// Pulls `repo@digest` with bollard directly (fixture setup, not the code under test).
pub(crate) async fn raw_pull(api: &bollard::Docker, reference: &str) {
    let (repo, digest) = reference.split_once('@').unwrap();
    let options = bollard::query_parameters::CreateImageOptionsBuilder::new()
        .from_image(repo)
        .tag(digest)
        .build();
    let mut stream = api.create_image(Some(options), None, None);
    while let Some(item) = stream.next().await {
        item.unwrap_or_else(|e| panic!("fixture pull of {reference}: {e}"));
    }
}

/// A TCP proxy in front of the registry that can throttle and stall the registry→daemon
/// direction, and counts the bytes it forwarded that way. It can also play a registry that
/// breaks down mid-pull ([`ProxyFault`]): once `cut_after` bytes went through it drops every
/// open connection and answers blob requests with `429 Too Many Requests` (the registry's JSON
/// error body, code TOOMANYREQUESTS) until, if ever, a new pull starts (its `GET /v2/` ping: a
/// manifest request would not do, as the daemon may take the manifest from its own content store).
/// While busy it reads the head of each new connection's first request and lets through one
/// request per connection, so a kept-alive connection cannot slip past it.
pub(crate) struct RegistryProxy {
    pub port: u16,
    pub forwarded: Arc<AtomicU64>,
    pub open_connections: Arc<AtomicUsize>,
    pub stalled: Arc<AtomicBool>,
    /// Requests answered with 429.
    pub answered_busy: Arc<AtomicUsize>,
    /// Pull attempts that began while busy, counted by their `GET /v2/` ping (the daemon's own
    /// retries of a layer within one pull do not ping again).
    pub pulls_while_busy: Arc<AtomicUsize>,
    /// Times every connection was dropped at once.
    pub cuts: Arc<AtomicUsize>,
}

/// The breakdown [`RegistryProxy::start_faulty`] plays.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProxyFault {
    /// Bytes forwarded before all connections are dropped and the registry turns busy (0: busy
    /// from the start, with nothing to drop).
    pub cut_after: u64,
    /// Busy until the next pull begins (true), or for good, manifests included.
    pub until_next_pull: bool,
}

#[derive(Default)]
struct ProxyState {
    forwarded: Arc<AtomicU64>,
    open: Arc<AtomicUsize>,
    stalled: Arc<AtomicBool>,
    answered_busy: Arc<AtomicUsize>,
    pulls_while_busy: Arc<AtomicUsize>,
    cuts: Arc<AtomicUsize>,
    /// Bytes at which to cut (u64::MAX: never, or already done).
    cut_at: AtomicU64,
    busy: AtomicBool,
    until_next_pull: bool,
    cut_signal: tokio::sync::Notify,
}

const BUSY_BODY: &str =
    r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"bench proxy: slow down","detail":null}]}"#;

/// What a busy proxy does with a new connection's first request.
enum BusyVerdict {
    /// Answer 429 and hang up.
    Refuse,
    /// Let this one request through, then close the connection.
    PassOnce,
    /// The registry is back: let the connection through as it is.
    Pass,
}

impl RegistryProxy {
    /// `bytes_per_sec`: throttle of the download direction.
    pub(crate) async fn start(bytes_per_sec: u64) -> RegistryProxy {
        Self::launch(bytes_per_sec, None).await
    }

    /// Throttled like [`RegistryProxy::start`], and breaking down as `fault` says.
    pub(crate) async fn start_faulty(bytes_per_sec: u64, fault: ProxyFault) -> RegistryProxy {
        Self::launch(bytes_per_sec, Some(fault)).await
    }

    async fn launch(bytes_per_sec: u64, fault: Option<ProxyFault>) -> RegistryProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let busy_now = fault.is_some_and(|f| f.cut_after == 0);
        let state = Arc::new(ProxyState {
            cut_at: AtomicU64::new(match fault {
                Some(f) if f.cut_after > 0 => f.cut_after,
                _ => u64::MAX,
            }),
            busy: AtomicBool::new(busy_now),
            until_next_pull: fault.is_some_and(|f| f.until_next_pull),
            ..ProxyState::default()
        });
        let shared = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(shared.clone().serve(client, bytes_per_sec));
            }
        });
        RegistryProxy {
            port,
            forwarded: state.forwarded.clone(),
            open_connections: state.open.clone(),
            stalled: state.stalled.clone(),
            answered_busy: state.answered_busy.clone(),
            pulls_while_busy: state.pulls_while_busy.clone(),
            cuts: state.cuts.clone(),
        }
    }

    /// The registry address through this proxy.
    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl ProxyState {
    async fn serve(self: Arc<Self>, mut client: TcpStream, bytes_per_sec: u64) {
        // Created now, so a cut from any connection wakes this one even mid-read.
        let cut = self.cut_signal.notified();
        let mut head = Vec::new();
        let mut one_request = false;
        if self.busy.load(Ordering::SeqCst) {
            let Some(read) = read_head(&mut client).await else {
                return;
            };
            head = read;
            match self.judge(&head) {
                BusyVerdict::Refuse => {
                    answer_busy(client).await;
                    self.answered_busy.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                BusyVerdict::PassOnce => {
                    one_request = true;
                    head = with_connection_close(&head);
                }
                BusyVerdict::Pass => {}
            }
        }
        let Ok(upstream) = TcpStream::connect(REGISTRY).await else {
            return;
        };
        self.open.fetch_add(1, Ordering::SeqCst);
        let (mut client_read, mut client_write) = client.into_split();
        let (mut up_read, mut up_write) = upstream.into_split();
        let upload = async {
            if up_write.write_all(&head).await.is_ok() && !one_request {
                let _ = tokio::io::copy(&mut client_read, &mut up_write).await;
            }
            if one_request {
                // The registry closes after its answer (Connection: close); wait for that.
                std::future::pending::<()>().await;
            }
            let _ = up_write.shutdown().await;
        };
        let download = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                while self.stalled.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let n = match up_read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if client_write.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                let total = self.forwarded.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
                if self.cut_due(total) {
                    break;
                }
                let pause = Duration::from_secs_f64(n as f64 / bytes_per_sec as f64);
                tokio::time::sleep(pause).await;
            }
        };
        // Either direction ending (the daemon hanging up) or a cut ends the connection; a cut
        // ends idle kept-alive ones too.
        tokio::select! { () = upload => {}, () = download => {}, () = cut => {} }
        self.open.fetch_sub(1, Ordering::SeqCst);
    }

    fn judge(&self, head: &[u8]) -> BusyVerdict {
        if head.first() == Some(&0x16) {
            // A TLS hello (the daemon tries https first): the registry's plain answer makes
            // the daemon fall back to http, as without the proxy.
            return BusyVerdict::Pass;
        }
        let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
        let line = String::from_utf8_lossy(line);
        if line.starts_with("GET /v2/ ") {
            self.pulls_while_busy.fetch_add(1, Ordering::SeqCst);
            if self.until_next_pull {
                self.busy.store(false, Ordering::SeqCst);
                return BusyVerdict::Pass;
            }
            return BusyVerdict::PassOnce;
        }
        if line.contains("/manifests/") {
            return BusyVerdict::Refuse;
        }
        if line.contains("/blobs/") {
            return BusyVerdict::Refuse;
        }
        BusyVerdict::PassOnce
    }

    /// True once, for the connection whose bytes crossed the cut: turns the proxy busy and
    /// drops every other connection.
    fn cut_due(&self, forwarded: u64) -> bool {
        let at = self.cut_at.load(Ordering::SeqCst);
        if forwarded < at {
            return false;
        }
        if self
            .cut_at
            .compare_exchange(at, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        self.busy.store(true, Ordering::SeqCst);
        self.cuts.fetch_add(1, Ordering::SeqCst);
        self.cut_signal.notify_waiters();
        true
    }
}

/// The first request's head (up to the blank line), or the first bytes of a TLS hello.
async fn read_head(client: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.first() == Some(&0x16) {
            break;
        }
    }
    Some(head)
}

/// The request head with `Connection: close` added after its request line.
fn with_connection_close(head: &[u8]) -> Vec<u8> {
    let Some(end) = head.windows(2).position(|w| w == b"\r\n") else {
        return head.to_vec();
    };
    let mut out = head[..end + 2].to_vec();
    out.extend_from_slice(b"Connection: close\r\n");
    out.extend_from_slice(&head[end + 2..]);
    out
}

/// Answers as a rate-limiting registry does, then hangs up.
async fn answer_busy(mut client: TcpStream) {
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n\
         Docker-Distribution-API-Version: registry/2.0\r\nRetry-After: 1\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{BUSY_BODY}",
        BUSY_BODY.len()
    );
    let _ = client.write_all(answer.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// Labels map helper.
pub(crate) fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Removes what a test created even when it panics: containers (forced), networks, images.
#[derive(Default)]
pub(crate) struct Cleanup {
    pub containers: std::sync::Mutex<Vec<String>>,
    pub networks: std::sync::Mutex<Vec<String>>,
    pub images: std::sync::Mutex<Vec<String>>,
}

impl Cleanup {
    pub(crate) fn container(&self, id: &str) {
        self.containers.lock().unwrap().push(id.to_owned());
    }
    pub(crate) fn network(&self, name: &str) {
        self.networks.lock().unwrap().push(name.to_owned());
    }
    pub(crate) fn image(&self, reference: &str) {
        self.images.lock().unwrap().push(reference.to_owned());
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let containers = std::mem::take(&mut *self.containers.lock().unwrap());
        let networks = std::mem::take(&mut *self.networks.lock().unwrap());
        let images = std::mem::take(&mut *self.images.lock().unwrap());
        // A fresh runtime on its own thread: Drop may run inside (or outside) a runtime.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let Ok(api) =
                    bollard::Docker::connect_with_unix(SOCKET, 60, bollard::API_DEFAULT_VERSION)
                else {
                    return;
                };
                let Ok(api) = api.negotiate_version().await else {
                    return;
                };
                for id in containers {
                    remove_container(&api, &id).await;
                }
                for name in networks {
                    let _ = api.remove_network(&name).await;
                }
                for reference in images {
                    remove_image_fully(&api, &reference).await;
                }
            });
        })
        .join();
    }
}
