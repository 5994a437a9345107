//! The STAND-IN Hugging Face hub (`tests/bench/hub/standin-hub`) for a test: started on
//! loopback over a fresh folder of repositories, its request log read back, stopped on drop.
//! Also the tiny real safetensors checkpoint the tests serve.
// A harness that cannot set up fails the test that asked, as a test would.
#![allow(clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bench::workspace_root;

/// A running STAND-IN hub.
#[derive(Debug)]
pub struct StandinHub {
    child: Child,
    dir: tempfile::TempDir,
    pub hub_port: u16,
    pub cdn_port: u16,
}

/// One request as the STAND-IN logged it.
#[derive(Debug, Clone)]
pub struct Request {
    /// `hub` or `cdn`.
    pub server: String,
    pub method: String,
    pub path: String,
    pub auth: bool,
    pub status: u64,
    pub bytes: u64,
}

impl StandinHub {
    pub fn start() -> Self {
        StandinHub::start_with(Command::new("python3"))
    }

    /// The hub in another network namespace (`--net=/proc/PID/ns/net`, as `nsenter` takes
    /// it), for a broker that runs there (engine_run's private dockerd): its loopback is not
    /// this one's. nsenter execs python3, so the child is the hub itself.
    pub fn start_in_netns(netns: &str) -> Self {
        let mut cmd = Command::new("nsenter");
        cmd.arg(netns).arg("python3");
        StandinHub::start_with(cmd)
    }

    // The child is moved into the StandinHub, whose Drop kills and waits for it.
    #[allow(clippy::zombie_processes)]
    fn start_with(mut command: Command) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        std::fs::create_dir_all(dir.path().join("repos")).expect("the repos folder");
        let ports = dir.path().join("ports");
        let mut child = command
            .arg(workspace_root().join("tests/bench/hub/standin-hub"))
            .arg("--root")
            .arg(dir.path().join("repos"))
            .arg("--port-file")
            .arg(&ports)
            .arg("--log")
            .arg(dir.path().join("requests.log"))
            .spawn()
            .expect("python3 runs the STAND-IN hub");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(text) = std::fs::read_to_string(&ports) {
                let mut it = text
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u16>().ok());
                if let (Some(hub_port), Some(cdn_port)) = (it.next(), it.next()) {
                    return StandinHub {
                        child,
                        dir,
                        hub_port,
                        cdn_port,
                    };
                }
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the STAND-IN hub did not start");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.hub_port)
    }

    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.dir.path().join("repos").join(repo)
    }

    /// Creates repository `repo` (`org/name`) with `files` and, if given, its `.standin.json`.
    pub fn add_repo(&self, repo: &str, files: &[(&str, &[u8])], standin: Option<Value>) -> PathBuf {
        let dir = self.repo_dir(repo);
        for (name, content) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("the repo folder");
            std::fs::write(&path, content).expect("a repo file");
        }
        if let Some(meta) = standin {
            std::fs::write(dir.join(".standin.json"), meta.to_string()).expect(".standin.json");
        }
        dir
    }

    /// Creates repository `repo` holding [`tiny_model`] with `weights`, and its `.standin.json`.
    pub fn add_tiny_model(&self, repo: &str, weights: &[u8], standin: Option<Value>) -> PathBuf {
        let files = tiny_model(weights);
        let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (*n, c.as_slice())).collect();
        self.add_repo(repo, &refs, standin)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        let text =
            std::fs::read_to_string(self.dir.path().join("requests.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| Request {
                server: v["server"].as_str().unwrap_or("").to_owned(),
                method: v["method"].as_str().unwrap_or("").to_owned(),
                path: v["path"].as_str().unwrap_or("").to_owned(),
                auth: v["auth"].as_bool().unwrap_or(false),
                status: v["status"].as_u64().unwrap_or(0),
                bytes: v["bytes"].as_u64().unwrap_or(0),
            })
            .collect()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("requests.log")
    }
}

impl Drop for StandinHub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A valid safetensors file: one F32 tensor `w` of `count` values (8-byte little-endian header
/// length, the JSON header padded to 8 bytes, the data).
pub fn safetensors(count: usize) -> Vec<u8> {
    let mut header = format!(
        r#"{{"__metadata__":{{"format":"pt"}},"w":{{"dtype":"F32","shape":[{count}],"data_offsets":[0,{}]}}}}"#,
        count * 4
    )
    .into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    for i in 0..count {
        out.extend_from_slice(&(i as f32 * 0.5).to_le_bytes());
    }
    out
}

/// The files of a small model repository: config, tokenizer, weights, and files never fetched.
pub fn tiny_model(weights: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "config.json",
            br#"{"architectures":["LlamaForCausalLM"],"num_hidden_layers":1}"#.to_vec(),
        ),
        ("generation_config.json", br#"{"do_sample":false}"#.to_vec()),
        ("tokenizer.json", br#"{"version":"1.0"}"#.to_vec()),
        ("tokenizer_config.json", br#"{}"#.to_vec()),
        ("model.safetensors", weights.to_vec()),
        ("pytorch_model.bin", b"not fetched: a pickle".to_vec()),
        ("README.md", b"# tiny\n".to_vec()),
    ]
}

/// The python of a venv with the real huggingface_hub from PyPI (`tests/bench/hub/hf-venv`,
/// which installs it once, pinned).
pub fn hf_python() -> PathBuf {
    let out = Command::new(workspace_root().join("tests/bench/hub/hf-venv"))
        .output()
        .expect("tests/bench/hub/hf-venv runs");
    assert!(
        out.status.success(),
        "tests/bench/hub/hf-venv failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
