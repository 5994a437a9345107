//! `enginekit start / stop / ps / logs` end to end on a SIMULATED GPU HOST (see setup_support):
//! the real broker binary, a real (private) dockerd, the real registry, a real `enginekit setup`
//! of a descriptor whose engine image is the bench's STAND-IN engine (tests/bench/standin-engine:
//! busybox and a script, NOT vLLM; it takes enginekit's vLLM argv and misbehaves on request of
//! the model folder's config.json). Stand-ins: nvidia-smi, the NVIDIA hook, and the engine.
//!
//! The private dockerd lives in its own network namespace, so its 127.0.0.1 publications are
//! reachable only there: the broker (readiness probe) and the test's HTTP requests run in that
//! namespace through `nsenter --net`, as a user's broker runs in the daemon's namespace.
// bench: exclusive=host-cdi
// bench: shared=host-packages,host-accounts,host-daemon-json

// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "setup_support/mod.rs"]
mod setup_support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use enginekit_integration::bench;
use serde_json::Value;
use setup_support::*;

/// The broker binary: the debug build, or `EKT_ENGINEKIT_BIN` (e.g. a release build for the
/// benchmark).
fn enginekit_bin() -> PathBuf {
    std::env::var_os("EKT_ENGINEKIT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| bench::bin("enginekit"))
}

/// A set-up simulated GPU host whose vllm engine is the STAND-IN engine image.
struct EngineHost {
    host: SimulatedGpuHost,
    netns: String,
    /// The STAND-IN engine image, by digest.
    standin: String,
    /// Another folder of STAND-IN vendor binaries for the broker (a different GPU fixture).
    standin_dir: Option<PathBuf>,
}

/// A running `enginekit start`, its JSON events read on a thread.
struct Started {
    child: Child,
    events: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Started {
    /// Waits for a `ready` or `error` event (or the process's end).
    fn outcome(&mut self, secs: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(event) => {
                    self.seen.push(event.clone());
                    if event["event"] == "ready" || event["event"] == "error" {
                        return event;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "no ready or error event within {secs} s; saw {:?}",
                        self.seen
                    );
                }
            }
        }
    }

    /// Waits for the process to exit; its status code and the rest of its events.
    fn finish(&mut self, secs: u64) -> (Option<i32>, Vec<Value>) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                let rest: Vec<Value> = self.events.try_iter().collect();
                self.seen.extend(rest.iter().cloned());
                return (status.code(), rest);
            }
            assert!(
                Instant::now() < deadline,
                "enginekit start did not exit within {secs} s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl EngineHost {
    /// A simulated GPU host set up by `enginekit setup` for the STAND-IN engine.
    fn start() -> EngineHost {
        let me = EngineHost::prepared();
        let setup = me.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
        assert!(
            setup.status.success(),
            "setup of the STAND-IN engine: {}",
            describe(&setup)
        );
        assert!(
            me.host.image_present(&me.standin),
            "setup pulled the STAND-IN engine"
        );
        me
    }

    /// The same host before setup: the descriptor names the STAND-IN engine's image.
    fn prepared() -> EngineHost {
        let standin = bench::standin_engine();
        let host = SimulatedGpuHost::start();
        host.write_descriptor(standin.clone(), 2);
        let pid = std::fs::read_to_string(
            host.dockerd
                .socket
                .parent()
                .expect("dir")
                .join("docker.pid"),
        )
        .expect("dockerd pid");
        let netns = format!("--net=/proc/{}/ns/net", pid.trim());
        EngineHost {
            host,
            netns,
            standin,
            standin_dir: None,
        }
    }

    /// `enginekit ARGS` in the daemon's network namespace.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(&self.netns)
            .arg(enginekit_bin())
            .args(args)
            .stdin(Stdio::null());
        self.host.broker_env(&mut cmd);
        if let Some(dir) = &self.standin_dir {
            cmd.env("ENGINEKIT_TEST_STANDIN_DIR", dir);
        }
        cmd
    }

    /// The broker's STAND-IN vendor binaries, but nvidia-smi answers from
    /// `standins/gpus/<fixture>` (the probe runs it with a cleared environment, so the fixture
    /// is chosen by a wrapper, not by `EK_STANDIN_GPUS` in the broker's environment).
    fn use_gpu_fixture(&mut self, fixture: &str) {
        let standins = &self.host.env.standins_dir;
        let dir = self.host.home.path().join(format!("standins-{fixture}"));
        self.standin_dir = Some(standins_with_gpu_fixture(standins, &dir, fixture));
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run enginekit")
    }

    fn model(&self, name: &str, config: &str) -> PathBuf {
        let dir = self.host.home.path().join("models").join(name);
        std::fs::create_dir_all(&dir).expect("model dir");
        std::fs::write(dir.join("config.json"), config).expect("config.json");
        std::fs::write(dir.join("model.safetensors"), b"STAND-IN weights").expect("weights");
        dir
    }

    fn start_engine(&self, model: &Path, extra: &[&str]) -> Started {
        self.start_named(&model.display().to_string(), extra, &[])
    }

    /// `start --model MODEL` (a folder or a hub name) with more environment.
    fn start_named(&self, model: &str, extra: &[&str], envs: &[(&str, String)]) -> Started {
        let mut args = vec!["start", model, "--engine", "vllm", "--json"];
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        command.envs(envs.iter().cloned());
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn enginekit start");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        break;
                    }
                }
            }
        });
        Started {
            child,
            events: rx,
            seen: Vec::new(),
        }
    }

    fn curl(&self, url: &str) -> Output {
        Command::new("nsenter")
            .args([self.netns.as_str(), "curl", "-sS", "-m", "5", url])
            .output()
            .expect("curl")
    }

    fn journal_records(&self) -> Vec<String> {
        let dir = self.host.state_dir().join("containers");
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".json"))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn session_records(&self) -> Vec<String> {
        let dir = self.host.state_dir().join("engine/sessions");
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn engine_containers(&self) -> Vec<String> {
        self.host
            .containers()
            .into_iter()
            .filter(|c| c.contains(" enginekit-") && !c.contains("gpu-check"))
            .collect()
    }

    /// Nothing of a session is left: no container, journal record or reservation.
    fn assert_nothing_left(&self, what: &str) {
        assert_eq!(
            self.engine_containers(),
            Vec::<String>::new(),
            "{what}: containers left"
        );
        assert_eq!(
            self.journal_records(),
            Vec::<String>::new(),
            "{what}: journal records left"
        );
        assert_eq!(
            self.session_records(),
            Vec::<String>::new(),
            "{what}: reservations left"
        );
    }

    fn inspect(&self, container: &str, format: &str) -> String {
        let out = self.host.docker(&["inspect", "-f", format, container]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

#[test]
fn start_serves_on_loopback_as_the_user_and_stop_is_confirmed_and_leaves_nothing() {
    let h = EngineHost::start();
    let model = h.model("Qwen-Stand-In", r#"{"architectures":["Qwen2ForCausalLM"]}"#);
    let mut first = h.start_engine(&model, &["--name", "qwen", "--context", "4096"]);
    let ready = first.outcome(120);
    assert_eq!(ready["event"], "ready", "{:?}", first.seen);
    let base = ready["base_url"].as_str().expect("base_url").to_owned();
    let port = ready["port"].as_u64().expect("port");
    assert_eq!(base, format!("http://127.0.0.1:{port}/v1"));
    let stages: Vec<&str> = first
        .seen
        .iter()
        .filter_map(|e| e["stage"].as_str())
        .collect();
    for stage in ["loading-weights", "starting-server", "ready"] {
        assert!(stages.contains(&stage), "{stage} missing from {stages:?}");
    }

    // The OpenAI-compatible endpoint answers through the base URL.
    let models = h.curl(&format!("{base}/models"));
    let body: Value = serde_json::from_slice(&models.stdout).unwrap_or_default();
    assert_eq!(body["data"][0]["id"], "qwen", "{}", describe(&models));
    assert_eq!(body["data"][0]["max_model_len"], 4096);

    // Published on 127.0.0.1 only; run as the user, no capabilities, no new privileges.
    let container = ready["container"].as_str().expect("container").to_owned();
    let ports: Value =
        serde_json::from_str(&h.inspect(&container, "{{json .NetworkSettings.Ports}}"))
            .expect("ports");
    let bindings = ports["8000/tcp"].as_array().expect("8000/tcp bound");
    assert!(!bindings.is_empty());
    for b in bindings {
        assert_eq!(b["HostIp"], "127.0.0.1", "{ports}");
    }
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    assert_eq!(
        h.inspect(&container, "{{.Config.User}}"),
        format!("{uid}:{gid}")
    );
    let logs = h.run(&["logs", "qwen"]);
    let text = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(
        text.contains(&format!(
            "identity: uid={uid} gid={gid} CapEff: 0000000000000000 NoNewPrivs=1"
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1"
        ),
        "{text}"
    );
    assert!(text.contains("--served-model-name qwen"), "{text}");
    assert_eq!(h.inspect(&container, "{{.HostConfig.CapDrop}}"), "[ALL]");

    let ps = h.run(&["ps", "--json"]);
    let listed: Value = serde_json::from_slice(&ps.stdout).expect("ps json");
    assert_eq!(listed[0]["name"], "qwen", "{}", describe(&ps));
    assert_eq!(listed[0]["state"], "ready");
    assert_eq!(listed[0]["container_status"], "running");

    // A second model on the same (only) card stops the first with a confirmed stop.
    let other = h.model("other", r#"{"architectures":["LlamaForCausalLM"]}"#);
    let mut second = h.start_engine(&other, &["--name", "second"]);
    let ready2 = second.outcome(120);
    assert_eq!(ready2["event"], "ready", "{:?}", second.seen);
    assert!(
        second
            .seen
            .iter()
            .any(|e| e["event"] == "evicted" && e["name"] == "qwen"),
        "{:?}",
        second.seen
    );
    let (code, rest) = first.finish(30);
    assert_eq!(code, Some(0), "the first start ends quietly: {rest:?}");
    assert!(rest.iter().any(|e| e["event"] == "stopped"), "{rest:?}");
    assert_eq!(
        h.engine_containers().len(),
        1,
        "{:?}",
        h.engine_containers()
    );

    // A port taken between the choice and the start: another one is tried.
    let mut taker = Command::new("nsenter")
        .args([h.netns.as_str(), "busybox", "nc", "-l", "-p", "18765"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("a listener on the port");
    std::thread::sleep(Duration::from_millis(300));
    let third = h.model("third", r#"{"architectures":["LlamaForCausalLM"]}"#);
    let mut collide = {
        let model = third.display().to_string();
        let mut cmd = h.command(&[
            "start",
            "--model",
            model.as_str(),
            "--name",
            "collide",
            "--json",
        ]);
        cmd.env("ENGINEKIT_TEST_ENGINE_PORT", "18765")
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Started {
            child,
            events: rx,
            seen: Vec::new(),
        }
    };
    let ready3 = collide.outcome(120);
    let _ = taker.kill();
    let _ = taker.wait();
    assert_eq!(ready3["event"], "ready", "{:?}", collide.seen);
    assert_ne!(ready3["port"], 18765);
    assert!(
        collide
            .seen
            .iter()
            .any(|e| e["event"] == "started" && e["attempt"] == 2),
        "{:?}",
        collide.seen
    );
    let (code, _) = second.finish(30);
    assert_eq!(
        code,
        Some(0),
        "the second model was stopped for the one on the same card"
    );
    let stop = h.run(&["stop", "collide", "--json"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = collide.finish(30);
    h.assert_nothing_left("after the port collision");
    let mut second = h.start_engine(&other, &["--name", "second"]);
    assert_eq!(second.outcome(120)["event"], "ready", "{:?}", second.seen);

    // stop is confirmed and leaves no container, journal record or reservation.
    let stop = h.run(&["stop", "second", "--json"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let (code, _) = second.finish(30);
    assert_eq!(code, Some(0));
    h.assert_nothing_left("after stop");

    // `remove` of the engine first stops its running model (confirmed), and its owner exits.
    let mut third = h.start_engine(&model, &["--name", "third"]);
    assert_eq!(third.outcome(120)["event"], "ready", "{:?}", third.seen);
    let remove = h.run(&["remove", "--engine", "vllm", "--yes", "--json"]);
    assert!(remove.status.success(), "{}", describe(&remove));
    let (code, rest) = third.finish(30);
    assert_eq!(code, Some(0), "{rest:?}");
    h.assert_nothing_left("after remove");
    assert!(h.host.installation().is_none());
}

/// The two cards of `standins/gpus/two-idle-4090s.csv` (STAND-IN, not real hardware).
const CARD_0: &str = "GPU-5f0c9c6e-8d1a-4b4e-9a57-2f4d8e1b7c30";
const CARD_1: &str = "GPU-7d3e1a52-6b09-4c8f-a2e4-1f5b9c3d8e67";

#[test]
fn a_model_no_card_alone_holds_is_served_on_two_with_tensor_parallelism_and_freed_whole() {
    let mut h = EngineHost::start();
    h.use_gpu_fixture("two-idle-4090s.csv");
    // Llama-3.1-8B's recorded config with 30 GiB of weights (a test figure; the STAND-IN engine
    // loads nothing). Each card: 24,564 MiB, 23,976 MiB free, so u = 90 and a budget of
    // 23,181,498,777 B: 30 GiB do not fit one. Two: 15 GiB each + 5 GiB overhead leave
    // 1,706,662,297 B for 65,536 KV bytes per token per card: 1,627 blocks = 26,032 tokens.
    let big = h.host.home.path().join("models").join("big");
    std::fs::create_dir_all(&big).expect("model dir");
    std::fs::write(
        big.join("config.json"),
        include_str!("../../broker/tests/fixtures/models/meta-llama--Llama-3.1-8B/config.json"),
    )
    .expect("config.json");
    std::fs::write(
        big.join("model.safetensors.index.json"),
        format!(
            r#"{{"metadata":{{"total_size":{}}},"weight_map":{{}}}}"#,
            30u64 << 30
        ),
    )
    .expect("index");
    let mut first = h.start_engine(&big, &["--name", "big"]);
    let ready = first.outcome(120);
    assert_eq!(ready["event"], "ready", "{:?}", first.seen);
    let fitted = first
        .seen
        .iter()
        .find(|e| e["event"] == "fitted")
        .unwrap_or_else(|| panic!("no fitted event: {:?}", first.seen));
    assert_eq!(
        fitted["gpus"],
        serde_json::json!([CARD_0, CARD_1]),
        "{fitted}"
    );
    assert_eq!(fitted["utilization_pct"], 90, "{fitted}");
    assert_eq!(fitted["context"], 26_032, "{fitted}");
    assert_eq!(
        ready["gpus"],
        serde_json::json!([CARD_0, CARD_1]),
        "{ready}"
    );

    // One container with both cards in one request, 2 GiB of /dev/shm per card, private IPC.
    let container = ready["container"].as_str().expect("container").to_owned();
    let requests: Value =
        serde_json::from_str(&h.inspect(&container, "{{json .HostConfig.DeviceRequests}}"))
            .expect("device requests");
    assert_eq!(requests.as_array().map(Vec::len), Some(1), "{requests}");
    assert_eq!(
        requests[0]["DeviceIDs"],
        serde_json::json!([CARD_0, CARD_1]),
        "{requests}"
    );
    assert_eq!(
        h.inspect(&container, "{{.HostConfig.ShmSize}}"),
        "4294967296"
    );
    assert_eq!(h.inspect(&container, "{{.HostConfig.IpcMode}}"), "private");
    let logs = String::from_utf8_lossy(&h.run(&["logs", "big"]).stdout).into_owned();
    assert!(
        logs.contains("--max-model-len 26032 --max-num-seqs 1 --gpu-memory-utilization 0.90 --tensor-parallel-size 2"),
        "{logs}"
    );
    // One reservation naming both cards.
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(h.host.state_dir().join("engine/sessions/big.json"))
            .expect("session record"),
    )
    .expect("record json");
    assert_eq!(record["gpu"], CARD_0);
    assert_eq!(record["more_gpus"], serde_json::json!([CARD_1]));

    // A one-card model asked for the second card stops the group (confirmed), which frees
    // both cards together: only the new session holds anything afterwards.
    let small = h.model("small", r#"{"architectures":["LlamaForCausalLM"]}"#);
    let mut second = h.start_engine(&small, &["--name", "small", "--gpu", CARD_1]);
    let ready2 = second.outcome(120);
    assert_eq!(ready2["event"], "ready", "{:?}", second.seen);
    assert!(
        second
            .seen
            .iter()
            .any(|e| e["event"] == "evicted" && e["name"] == "big"),
        "{:?}",
        second.seen
    );
    let (code, rest) = first.finish(30);
    assert_eq!(code, Some(0), "the group's start ends quietly: {rest:?}");
    assert_eq!(h.session_records(), ["small.json"]);
    let record: Value = serde_json::from_str(
        &std::fs::read_to_string(h.host.state_dir().join("engine/sessions/small.json"))
            .expect("session record"),
    )
    .expect("record json");
    assert_eq!(record["gpu"], CARD_1);
    assert!(record.get("more_gpus").is_none(), "{record}");
    assert_eq!(
        h.engine_containers().len(),
        1,
        "{:?}",
        h.engine_containers()
    );

    let stop = h.run(&["stop", "small", "--json"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = second.finish(30);
    h.assert_nothing_left("after the group and the one-card model");
}

#[test]
fn kill_9_of_the_owner_lets_the_watchdog_end_the_engine_and_the_next_start_reconciles() {
    let h = EngineHost::start();
    let model = h.model("m", r#"{"architectures":["Qwen2ForCausalLM"]}"#);
    let mut started = h.start_engine(&model, &["--name", "orphan"]);
    let ready = started.outcome(120);
    assert_eq!(ready["event"], "ready", "{:?}", started.seen);
    let container = ready["container"].as_str().expect("container").to_owned();
    let killed = Instant::now();
    started.child.kill().expect("kill -9 enginekit start");
    let _ = started.child.wait();
    let mut ended = None;
    while killed.elapsed() < Duration::from_secs(90) {
        if h.inspect(&container, "{{.State.Running}}") == "false" {
            ended = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let ended = ended.expect("the watchdog never ended the engine");
    println!(
        "kill -9 of the owner → container ended after {ended:?} (stale limit 30 s + one 5 s poll)"
    );
    assert_eq!(
        h.inspect(&container, "{{.State.ExitCode}}"),
        "97",
        "the watchdog's stale exit"
    );
    assert!(
        ended >= Duration::from_secs(24),
        "ended before the stale limit: {ended:?}"
    );
    assert!(
        ended <= Duration::from_secs(30 + 5 + 3),
        "later than the stale limit + one poll: {ended:?}"
    );
    assert_eq!(
        h.session_records().len(),
        1,
        "the dead owner's reservation is still on disk"
    );

    // The next broker start reconciles: the container is removed, the records dropped.
    let ps = h.run(&["ps", "--json"]);
    assert!(ps.status.success(), "{}", describe(&ps));
    h.assert_nothing_left("after reconcile");
}

/// The Llama-3.1-8B config recorded in broker/tests/fixtures (a design the fit check sizes).
fn llama_config() -> Vec<u8> {
    std::fs::read(
        bench::workspace_root()
            .join("broker/tests/fixtures/models/meta-llama--Llama-3.1-8B/config.json"),
    )
    .expect("the recorded Llama config")
}

/// The STAND-IN hub in the daemon's namespace (where the broker runs and asks it), serving
/// `org/tiny`: a small checkpoint the STAND-IN engine serves. With it, the hub cache in the
/// user's home and the environment a broker finds both with (`HF_HUB_CACHE`, `HF_ENDPOINT`).
fn hub_with_tiny(
    h: &EngineHost,
) -> (
    enginekit_integration::standin_hub::StandinHub,
    PathBuf,
    Vec<(&'static str, String)>,
) {
    use enginekit_integration::standin_hub::{safetensors, tiny_model, StandinHub};
    let hub = StandinHub::start_in_netns(&h.netns);
    let weights = safetensors(1000);
    let mut files = tiny_model(&weights);
    files[0].1 = br#"{"architectures":["Qwen2ForCausalLM"],"enginekit_standin":"ready"}"#.to_vec();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (*n, c.as_slice())).collect();
    hub.add_repo("org/tiny", &refs, None);
    let cache = h.host.home.path().join("hf-cache");
    let env = vec![
        ("HF_HUB_CACHE", cache.display().to_string()),
        ("HF_ENDPOINT", hub.endpoint()),
    ];
    (hub, cache, env)
}

#[test]
fn start_by_hub_name_fits_first_pulls_into_the_cache_and_serves_the_snapshot_offline() {
    use enginekit_integration::standin_hub::safetensors;
    let h = EngineHost::start();
    let (hub, cache, mut env) = hub_with_tiny(&h);
    let shard = safetensors(100);
    let index = serde_json::json!({
        "metadata": {"total_size": 2_000_000_000_000u64},
        "weight_map": {"w": "model-00001-of-00001.safetensors"}
    })
    .to_string();
    let config = llama_config();
    hub.add_repo(
        "org/huge",
        &[
            ("config.json", config.as_slice()),
            ("model.safetensors.index.json", index.as_bytes()),
            ("model-00001-of-00001.safetensors", shard.as_slice()),
        ],
        None,
    );
    env.push(("HF_TOKEN", "hf_secret_token".to_owned()));

    // 2 TB of weights fit no STAND-IN card: refused from the small files, nothing downloaded,
    // no container.
    let mut huge = h.start_named("org/huge", &[], &env);
    let refused = huge.outcome(60);
    assert_eq!(refused["error"]["code"], "MODEL_DOES_NOT_FIT", "{refused}");
    let (code, _) = huge.finish(30);
    assert_eq!(code, Some(1));
    assert!(
        hub.requests()
            .iter()
            .all(|r| r.server == "hub" && !r.path.ends_with(".safetensors")),
        "{:?}",
        hub.requests()
    );
    assert!(
        !cache.join("models--org--huge/blobs").exists()
            || std::fs::read_dir(cache.join("models--org--huge/blobs"))
                .unwrap()
                .next()
                .is_none()
    );
    h.assert_nothing_left("a refused hub model");

    // org/tiny: fitted, pulled, served from snapshots/<commit> in its mounted cache folder.
    let mut tiny = h.start_named("org/tiny", &["--context", "4096"], &env);
    let ready = tiny.outcome(180);
    assert_eq!(ready["event"], "ready", "{:?}", tiny.seen);
    assert_eq!(ready["name"], "tiny");
    assert_eq!(ready["repo"], "org/tiny");
    let commit = ready["commit"].as_str().expect("commit").to_owned();
    assert!(
        tiny.seen
            .iter()
            .any(|e| e["event"] == "pulled" && e["commit"] == commit.as_str()),
        "{:?}",
        tiny.seen
    );
    let container = ready["container"].as_str().expect("container").to_owned();
    let logs = h.run(&["logs", "tiny"]);
    let text = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(
        text.contains(&format!("argv: serve /enginekit/model/snapshots/{commit} ")),
        "{text}"
    );
    assert!(text.contains("HF_HUB_OFFLINE=1"), "{text}");
    // One read-only mount of the model's cache folder, not the whole cache; no token inside.
    let mounts = h.inspect(&container, "{{json .Mounts}}");
    let mounts: Value = serde_json::from_str(&mounts).expect("mounts");
    let model = mounts
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["Destination"] == "/enginekit/model")
        .expect("the model mount");
    assert_eq!(model["RW"], false, "{mounts}");
    assert!(
        model["Source"]
            .as_str()
            .unwrap()
            .ends_with("hf-cache/models--org--tiny"),
        "{mounts}"
    );
    let env_inside = h.inspect(&container, "{{json .Config.Env}}");
    assert!(!env_inside.contains("hf_secret"), "{env_inside}");
    let ps = h.run(&["ps", "--json"]);
    let listed: Value = serde_json::from_slice(&ps.stdout).expect("ps json");
    assert_eq!(listed[0]["model_repo"], "org/tiny", "{listed}");
    assert_eq!(listed[0]["model_commit"], commit.as_str(), "{listed}");

    let stop = h.run(&["stop", "tiny"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = tiny.finish(30);
    h.assert_nothing_left("a hub model stopped");

    // Again, offline: the cache serves it and the hub is not asked.
    let asked = hub.requests().len();
    let mut offline_env = env.clone();
    offline_env.push(("HF_HUB_OFFLINE", "1".to_owned()));
    let mut again = h.start_named("org/tiny", &[], &offline_env);
    let ready = again.outcome(180);
    assert_eq!(ready["event"], "ready", "{:?}", again.seen);
    assert_eq!(ready["commit"], commit.as_str());
    assert_eq!(hub.requests().len(), asked, "{:?}", hub.requests());
    let stop = h.run(&["stop", "tiny"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = again.finish(30);
    h.assert_nothing_left("the offline start stopped");
}

/// `enginekit start ORG/NAME` where the engine is not set up: without a yes (a pipe, no --yes)
/// it shows the setup's plan, changes nothing and downloads nothing; with --yes it sets up with
/// the plan `enginekit plan --json` shows (the same digest), the model's download beside the
/// setup from the yes on (its events come before the setup's result), then serves it.
#[test]
fn start_by_hub_name_where_the_engine_is_not_set_up_plans_asks_sets_up_downloads_beside_and_serves()
{
    let h = EngineHost::prepared();
    let (hub, _cache, env) = hub_with_tiny(&h);
    let plan = h.run(&["plan", "--engine", "vllm", "--json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout).expect("plan --json");
    let digest = plan["plan_digest"]
        .as_str()
        .expect("plan_digest")
        .to_owned();

    // No yes: the plan, MANAGED_CONSENT_REQUIRED, nothing set up, no weights fetched.
    let refused = h
        .command(&["start", "org/tiny", "--json"])
        .envs(env.clone())
        .output()
        .expect("run enginekit start");
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    let said: Vec<Value> = String::from_utf8_lossy(&refused.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        said.iter()
            .any(|e| e["event"] == "plan" && e["plan"]["plan_digest"] == digest.as_str()),
        "{said:?}"
    );
    let last = said.last().expect("events");
    assert_eq!(
        last["error"]["code"], "MANAGED_CONSENT_REQUIRED",
        "{said:?}"
    );
    assert!(h.host.installation().is_none());
    assert!(!h.host.image_present(&h.standin));
    assert!(
        hub.requests()
            .iter()
            .all(|r| !r.path.ends_with(".safetensors")),
        "{:?}",
        hub.requests()
    );

    // --yes: set up with that plan, the download beside it, then served.
    let mut started = h.start_named("org/tiny", &["--yes"], &env);
    let ready = started.outcome(240);
    assert_eq!(ready["event"], "ready", "{:?}", started.seen);
    assert_eq!(ready["repo"], "org/tiny");
    let at = |what: &dyn Fn(&Value) -> bool| started.seen.iter().position(what);
    let consented = at(&|e| e["event"] == "plan" && e["plan"]["plan_digest"] == digest.as_str());
    let result = at(&|e| e["event"] == "result" && e["phase"] == "ready");
    let pulled = at(&|e| e["event"] == "pulled" && e["from_cache"] == false);
    assert!(consented.is_some(), "{:?}", started.seen);
    assert!(result.is_some() && pulled.is_some(), "{:?}", started.seen);
    assert!(
        pulled < result,
        "the download waited for the setup: {:?}",
        started.seen
    );
    assert_eq!(
        h.host.installation().expect("installation")["status"],
        "ready"
    );
    let stop = h.run(&["stop", "tiny"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let (code, _) = started.finish(30);
    assert_eq!(code, Some(0), "{:?}", started.seen);
    h.assert_nothing_left("a start that set up first");
}

fn error_of(event: &Value) -> (String, String, String) {
    let e = &event["error"];
    (
        e["code"].as_str().unwrap_or_default().to_owned(),
        e["message"].as_str().unwrap_or_default().to_owned(),
        e["details"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn each_failure_gives_its_code_message_and_excerpt_and_leaves_nothing() {
    let h = EngineHost::start();

    // Refused before any Docker call: options, the model folder, and an engine not set up on a
    // machine its setup plan blocks (DOCKER_HOST points nowhere).
    let empty = h.host.home.path().join("models/empty");
    std::fs::create_dir_all(&empty).expect("empty dir");
    let good = h.model("good", r#"{"architectures":["Qwen2ForCausalLM"]}"#);
    let good_s = good.display().to_string();
    let empty_s = empty.display().to_string();
    for (args, code, needle) in [
        (
            vec!["--model", empty_s.as_str()],
            "INVALID_ARGUMENT",
            "config.json",
        ),
        (
            vec!["--model", good_s.as_str(), "--context", "10"],
            "INVALID_ARGUMENT",
            "context",
        ),
        (
            vec!["--model", good_s.as_str(), "--port", "80"],
            "INVALID_ARGUMENT",
            "port",
        ),
        // Not set up: start plans the setup first, which this machine blocks (no Docker at
        // DOCKER_HOST), and changes nothing.
        (
            vec!["--model", good_s.as_str(), "--engine", "tensorrt-llm"],
            "MANAGED_PREREQUISITE_BLOCKED",
            "nothing was changed",
        ),
    ] {
        let mut full = vec!["start", "--json"];
        full.extend(args.iter().copied());
        let out = h
            .command(&full)
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .output()
            .expect("run");
        assert!(!out.status.success());
        let event: Value = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .find(|e: &Value| e["event"] == "error")
            .unwrap_or_else(|| panic!("no error event: {}", describe(&out)));
        let (got, message, _) = error_of(&event);
        assert_eq!(got, code, "{args:?}: {message}");
        assert!(message.contains(needle), "{args:?}: {message}");
    }

    // Exits before readiness, classified from the log.
    let cases = [
        (
            "oom",
            "OUT_OF_MEMORY",
            "tried to allocate 1.96 GiB",
            "torch.OutOfMemoryError",
        ),
        (
            "unsupported",
            "MODEL_INCOMPATIBLE",
            "EnginekitStandInForCausalLM",
            "are not supported for now",
        ),
    ];
    for (mode, code, in_message, in_details) in cases {
        let model = h.model(mode, &format!(r#"{{"enginekit_standin":"{mode}"}}"#));
        let mut s = h.start_engine(&model, &[]);
        let event = s.outcome(120);
        let (got, message, details) = error_of(&event);
        assert_eq!(got, code, "{mode}: {event}");
        assert!(message.contains(in_message), "{mode}: {message}");
        assert!(details.contains(in_details), "{mode}: {details}");
        assert!(
            details.contains("[…] the end of the log:"),
            "{mode}: {details}"
        );
        let (exit, _) = s.finish(30);
        assert_eq!(exit, Some(1));
        h.assert_nothing_left(mode);
    }

    // Never ready, and a /health that redirects (never followed): timed out with the tail.
    for mode in ["never-ready", "redirect"] {
        let model = h.model(mode, &format!(r#"{{"enginekit_standin":"{mode}"}}"#));
        let mut s = h.start_engine(&model, &["--timeout", "8"]);
        let event = s.outcome(120);
        let (got, message, details) = error_of(&event);
        assert_eq!(got, "MODEL_LOAD_TIMED_OUT", "{mode}: {event}");
        assert!(message.contains("within 8 s"), "{mode}: {message}");
        assert!(
            details.contains("Graph capturing finished"),
            "{mode}: {details}"
        );
        if mode == "redirect" {
            assert!(
                s.seen
                    .iter()
                    .any(|e| e["event"] == "redirected" && e["status"] == 307),
                "{:?}",
                s.seen
            );
        }
        let _ = s.finish(30);
        h.assert_nothing_left(mode);
    }

    // An engine that dies after it was ready: the crash monitor classifies the tail, cleans up.
    let model = h.model("crash", r#"{"enginekit_standin":"crash"}"#);
    let mut s = h.start_engine(&model, &["--name", "crash"]);
    assert_eq!(s.outcome(120)["event"], "ready", "{:?}", s.seen);
    let event = s.outcome(60);
    let (code, message, details) = error_of(&event);
    assert_eq!(code, "OUT_OF_MEMORY", "{event}");
    assert!(message.contains("32768 tokens"), "{message}");
    assert!(details.contains("KV cache is needed"), "{details}");
    let (exit, _) = s.finish(30);
    assert_eq!(exit, Some(1));
    h.assert_nothing_left("crash after ready");

    // The GPU taken away under a running engine (STAND-IN: /health answers 500 and the engine
    // dies with NVML's Unknown Error, as after a daemon reload on the hook path): its own code
    // and the remedy, not a load failure; nothing left.
    let model = h.model("gpu-lost", r#"{"enginekit_standin":"gpu-lost"}"#);
    let mut s = h.start_engine(&model, &["--name", "gpu-lost"]);
    assert_eq!(s.outcome(120)["event"], "ready", "{:?}", s.seen);
    let event = s.outcome(60);
    let (code, message, details) = error_of(&event);
    assert_eq!(code, "GPU_LOST", "{event}");
    assert!(
        message.contains("taken away") && message.contains("daemon-reload"),
        "{message}"
    );
    assert!(details.contains("Failed to initialize NVML"), "{details}");
    let _ = s.finish(30);
    h.assert_nothing_left("gpu lost");

    // An engine that ignores TERM is still stopped (KILL after the grace), confirmed.
    let model = h.model("stubborn", r#"{"enginekit_standin":"ignore-term"}"#);
    let mut s = h.start_engine(&model, &["--name", "stubborn"]);
    assert_eq!(s.outcome(120)["event"], "ready", "{:?}", s.seen);
    let asked = Instant::now();
    let stop = h.run(&["stop", "--json"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    println!(
        "stop of an engine that ignores TERM took {:?}",
        asked.elapsed()
    );
    let _ = s.finish(30);
    h.assert_nothing_left("ignore-term");

    // Cancel during the load (SIGTERM to enginekit start): what it created is removed.
    let model = h.model("slow", r#"{"enginekit_standin":"never-ready"}"#);
    let mut s = h.start_engine(&model, &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !s.seen.iter().any(|e| e["event"] == "started") {
        assert!(Instant::now() < deadline, "{:?}", s.seen);
        if let Ok(e) = s.events.recv_timeout(Duration::from_millis(200)) {
            s.seen.push(e);
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(s.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let event = s.outcome(60);
    assert_eq!(error_of(&event).0, "MODEL_LOAD_CANCELLED", "{event}");
    let _ = s.finish(30);
    h.assert_nothing_left("cancel");
}

/// A private session bus that activates `enginekit serve` in the daemon's network namespace on
/// the simulated host; killed on drop (the serve log is printed when the test failed).
struct SessionBus {
    pid: u32,
    log: PathBuf,
    address: String,
    _dir: tempfile::TempDir,
}

impl SessionBus {
    fn start(h: &EngineHost) -> SessionBus {
        let dir = tempfile::tempdir().expect("bus dir");
        let services = dir.path().join("services");
        std::fs::create_dir_all(&services).expect("services dir");
        let mut exec = Command::new("/usr/bin/env");
        h.host.broker_env(&mut exec);
        let env: Vec<String> = exec
            .get_envs()
            .filter_map(|(k, v)| {
                v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            })
            .collect();
        let log = dir.path().join("serve.log");
        std::fs::write(
            services.join("org.enginekit.Broker1.service"),
            format!(
                "# Test activation file (engine_run): the built broker on a simulated GPU host\n\
                 [D-BUS Service]\nName=org.enginekit.Broker1\nExec=/bin/sh -c \"/usr/bin/env {} nsenter {} {} serve --idle-exit 3 2>>{}\"\n",
                env.join(" "),
                h.netns,
                enginekit_bin().display(),
                log.display()
            ),
        )
        .expect("activation file");
        let config = dir.path().join("session.conf");
        std::fs::write(
            &config,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
                 <busconfig>\n  <include>/usr/share/dbus-1/session.conf</include>\n  \
                 <servicedir>{}</servicedir>\n</busconfig>\n",
                services.display()
            ),
        )
        .expect("bus config");
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--fork", "--print-address=1", "--print-pid=1"])
            .arg(format!(
                "--address=unix:path={}",
                dir.path().join("bus").display()
            ))
            .stdin(Stdio::null())
            .output()
            .expect("dbus-daemon");
        assert!(out.status.success(), "dbus-daemon: {}", describe(&out));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let address = lines.next().expect("address").trim().to_owned();
        let pid = lines
            .next()
            .expect("pid")
            .trim()
            .parse()
            .expect("pid number");
        SessionBus {
            pid,
            log,
            address,
            _dir: dir,
        }
    }
}

impl SessionBus {
    /// A runtime for a test's bus client.
    fn runtime(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    async fn connect(&self) -> zbus::Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .expect("connect")
    }
}

impl Drop for SessionBus {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "enginekit serve log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

#[test]
fn load_and_unload_over_the_session_bus_with_the_signals_observed() {
    use futures_util::StreamExt;
    use std::collections::HashMap;
    use zbus::Variant as V;

    let h = EngineHost::start();
    let bus = SessionBus::start(&h);
    let model = h.model("bus-model", r#"{"architectures":["Qwen2ForCausalLM"]}"#);
    let failing = h.model("bus-oom", r#"{"enginekit_standin":"oom"}"#);
    bus.runtime().block_on(async {
        let conn = bus.connect().await;
        let broker = zbus::Proxy::new(
            &conn,
            "org.enginekit.Broker1",
            "/org/enginekit/Broker1",
            "org.enginekit.Broker1",
        )
        .await
        .expect("proxy");
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender("org.enginekit.Broker1")
            .build()
            .expect("match rule");
        let mut stream =
            zbus::MessageStream::for_match_rule(rule, &conn, std::num::NonZeroUsize::new(256))
                .await
                .expect("signals");

        // Refused before any Docker call: a folder without config.json.
        let empty = h.host.home.path().join("models/bus-empty");
        std::fs::create_dir_all(&empty).expect("empty");
        let refused = broker
            .call::<_, _, zbus::OwnedObjectPath>(
                "Load",
                &(
                    "vllm",
                    empty.display().to_string(),
                    HashMap::<&str, V>::new(),
                ),
            )
            .await
            .expect_err("no config.json");
        assert!(
            refused.to_string().contains("INVALID_ARGUMENT"),
            "{refused}"
        );

        let options = HashMap::from([("name", V::from("bus")), ("context", V::U32(4096))]);
        let session: zbus::OwnedObjectPath = broker
            .call("Load", &("vllm", model.display().to_string(), options))
            .await
            .expect("Load");
        assert_eq!(session.as_str(), "/org/enginekit/Broker1/session/bus");

        // Watch Changed signals of the session until ready.
        let mut states = Vec::new();
        let mut stages = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while !states
            .iter()
            .any(|s: &String| s == "ready" || s == "failed")
        {
            let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline, stream.next()).await else {
                panic!("no ready signal; states {states:?} stages {stages:?}");
            };
            let header = msg.header();
            if header.member().map(|m| m.as_str()) == Some("Changed")
                && header.path().map(|p| p.as_str()) == Some(session.as_str())
            {
                let (state, stage): (String, String) =
                    msg.body().deserialize().expect("Changed args");
                states.push(state);
                stages.push(stage);
            }
        }
        assert_eq!(
            states.last().map(String::as_str),
            Some("ready"),
            "{states:?}"
        );
        assert!(stages.iter().any(|s| s == "loading-weights"), "{stages:?}");
        let props = zbus::proxy::Builder::<zbus::Proxy>::new(&conn)
            .destination("org.enginekit.Broker1")
            .path(session.to_string())
            .interface("org.enginekit.Broker1.Session")
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .expect("session proxy");
        let base: String = props.get_property("BaseUrl").await.expect("BaseUrl");
        let gpu: String = props.get_property("Gpu").await.expect("Gpu");
        assert_eq!(gpu, STANDIN_GPU);
        let models = h.curl(&format!("{base}/models"));
        let body: Value = serde_json::from_slice(&models.stdout).unwrap_or_default();
        assert_eq!(body["data"][0]["id"], "bus", "{}", describe(&models));
        let listed: Vec<zbus::OwnedObjectPath> =
            broker.call("Sessions", &()).await.expect("Sessions");
        assert_eq!(listed, vec![session.clone()]);
        // The live session object has exactly the members of the interface XML.
        let golden =
            std::fs::read_to_string(bench::workspace_root().join("dbus/org.enginekit.Broker1.xml"))
                .expect("xml");
        let live = zbus::fdo::IntrospectableProxy::builder(&conn)
            .destination("org.enginekit.Broker1")
            .path(session.to_string())
            .build()
            .await
            .expect("introspectable")
            .introspect()
            .await
            .expect("Introspect");
        let iface = "org.enginekit.Broker1.Session";
        assert!(enginekit_integration::interface_xml::shape_of(&golden, iface).len() >= 6);
        assert_eq!(
            enginekit_integration::interface_xml::shape_of(&live, iface),
            enginekit_integration::interface_xml::shape_of(&golden, iface),
            "{iface} differs from the XML"
        );

        broker
            .call::<_, _, ()>("Unload", &(session.clone(),))
            .await
            .expect("Unload");
        let state: String = props.get_property("State").await.expect("State");
        assert_eq!(state, "stopped");
        let listed: Vec<zbus::OwnedObjectPath> =
            broker.call("Sessions", &()).await.expect("Sessions");
        assert!(listed.is_empty(), "{listed:?}");
        h.assert_nothing_left("after Unload");

        // A failing load reports its code on the session object.
        let options = HashMap::from([("name", V::from("bus-oom"))]);
        let failed: zbus::OwnedObjectPath = broker
            .call("Load", &("vllm", failing.display().to_string(), options))
            .await
            .expect("Load");
        let fprops = zbus::proxy::Builder::<zbus::Proxy>::new(&conn)
            .destination("org.enginekit.Broker1")
            .path(failed.to_string())
            .interface("org.enginekit.Broker1.Session")
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .expect("session proxy");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let state: String = fprops.get_property("State").await.expect("State");
            if state == "failed" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the OOM load never failed ({state})"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let error: String = fprops.get_property("Error").await.expect("Error");
        let error: Value = serde_json::from_str(&error).expect("Error JSON");
        assert_eq!(error["code"], "OUT_OF_MEMORY", "{error}");
        h.assert_nothing_left("after the failed bus load");

        // Unload during a load cancels it and removes what it created.
        let slow = h.model("bus-slow", r#"{"enginekit_standin":"never-ready"}"#);
        let options = HashMap::from([("name", V::from("bus-slow"))]);
        let loading: zbus::OwnedObjectPath = broker
            .call("Load", &("vllm", slow.display().to_string(), options))
            .await
            .expect("Load");
        let deadline = Instant::now() + Duration::from_secs(60);
        while h.engine_containers().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the slow load never created its container"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        broker
            .call::<_, _, ()>("Unload", &(loading.clone(),))
            .await
            .expect("Unload of a loading session");
        let lprops = zbus::proxy::Builder::<zbus::Proxy>::new(&conn)
            .destination("org.enginekit.Broker1")
            .path(loading.to_string())
            .interface("org.enginekit.Broker1.Session")
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .expect("session proxy");
        let error: String = lprops.get_property("Error").await.expect("Error");
        let error: Value = serde_json::from_str(&error).expect("Error JSON");
        assert_eq!(error["code"], "MODEL_LOAD_CANCELLED", "{error}");
        h.assert_nothing_left("after a cancelled bus load");
    });
}

/// Clock ticks per second of /proc/<pid>/stat (USER_HZ; 100 on Linux for every architecture
/// this runs on).
const USER_HZ: f64 = 100.0;

/// (utime + stime ticks, VmRSS kB, VmHWM kB) of `pid`.
fn usage(pid: u32) -> (u64, u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm end") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (ticks, kb("VmRSS:"), kb("VmHWM:"))
}

/// Benchmark (prints, asserts nothing about time): `enginekit start` of the STAND-IN engine
/// until ready, against `docker run` of the same image and argv, same user, capabilities, GPU,
/// mount and loopback port, followed by a `/health` poll loop with the broker's 1 s period;
/// median of 3 rounds each, as a ratio (target ≤ 1.05). Then the broker's RSS and CPU while
/// the engine runs for `EKT_ENGINE_BENCH_SECS` (default 60; targets ≤ 20 MB, ≤ 1 % of a core).
/// The broker is the debug build unless `EKT_ENGINEKIT_BIN` names another.
#[test]
fn bench_start_to_ready_against_docker_run_and_the_broker_at_rest() {
    let h = EngineHost::start();
    let model = h.model("bench", r#"{"architectures":["Qwen2ForCausalLM"]}"#);
    let rounds = 3;
    let mut ours = Vec::new();
    for _ in 0..rounds {
        let began = Instant::now();
        let mut s = h.start_engine(&model, &["--name", "bench"]);
        let ready = s.outcome(120);
        ours.push(began.elapsed().as_secs_f64());
        assert_eq!(ready["event"], "ready", "{:?}", s.seen);
        let stop = h.run(&["stop", "bench"]);
        assert!(stop.status.success(), "{}", describe(&stop));
        let _ = s.finish(30);
    }
    let installation = h.host.installation().expect("installation");
    let image = format!(
        "{}@{}",
        installation["image"]["repository"]
            .as_str()
            .expect("repository"),
        installation["image"]["digest"].as_str().expect("digest")
    );
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let mut peer = Vec::new();
    for round in 0..rounds {
        let port = 18000 + round;
        let name = format!("ekt-bench-peer-{round}");
        let script = format!(
            "docker -H {host} run -d --name {name} --user {uid}:{gid} --cap-drop ALL \
             --security-opt no-new-privileges --gpus device={gpu} -p 127.0.0.1:{port}:8000 \
             -v {model}:/enginekit/model:ro {image} vllm serve /enginekit/model \
             --served-model-name bench --host 0.0.0.0 --port 8000 --max-model-len 8192 \
             --max-num-seqs 1 --gpu-memory-utilization 0.90 >/dev/null && \
             until curl -fsS -o /dev/null -m 2 http://127.0.0.1:{port}/health; do sleep 1; done",
            host = h.host.dockerd.host,
            gpu = STANDIN_GPU,
            model = model.display(),
        );
        let began = Instant::now();
        let out = Command::new("nsenter")
            .args([h.netns.as_str(), "timeout", "120", "sh", "-c", &script])
            .output()
            .expect("docker run peer");
        peer.push(began.elapsed().as_secs_f64());
        assert!(out.status.success(), "{}", describe(&out));
        let _ = h.host.docker(&["rm", "-f", &name]);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(ours.clone()), median(peer.clone()));
    println!(
        "BENCH start-to-ready: enginekit start {a:.2} s {ours:?} / docker run + /health poll {b:.2} s {peer:?} = ratio {:.3} (target ≤ 1.05)",
        a / b
    );

    let secs: u64 = std::env::var("EKT_ENGINE_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let mut s = h.start_engine(&model, &["--name", "bench"]);
    assert_eq!(s.outcome(120)["event"], "ready", "{:?}", s.seen);
    let pid = s.child.id();
    let (t0, _, _) = usage(pid);
    std::thread::sleep(Duration::from_secs(secs));
    let (t1, rss, hwm) = usage(pid);
    let cpu = (t1 - t0) as f64 / USER_HZ / secs as f64 * 100.0;
    println!(
        "BENCH broker at rest with a ready engine for {secs} s ({}): RSS {:.1} MB (peak {:.1} MB, target ≤ 20 MB), CPU {cpu:.2} % of a core (target ≤ 1 %)",
        enginekit_bin().display(),
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0,
    );
    assert!(t1 >= t0);
    let stop = h.run(&["stop", "bench"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = s.finish(30);
    h.assert_nothing_left("after the benchmark");
}

/// The example desktop client (examples/python/enginekit_client.py: Python and GLib's GDBus,
/// no enginekit code) against the real session service: it lists the engines, shows the plan
/// with its digest, consents, calls Setup with that digest, follows the operation's signals to
/// ready, loads a model and prints its URL. What it printed is checked line by line, and the
/// URL really serves the model.
#[test]
fn the_python_gdbus_example_sets_up_and_loads_a_model_through_the_session_service() {
    let h = EngineHost::prepared();
    let bus = SessionBus::start(&h);
    let model = h.model("py-model", r#"{"architectures":["Qwen2ForCausalLM"]}"#);
    let client = bench::workspace_root().join("examples/python/enginekit_client.py");
    let out = Command::new("timeout")
        .args(["300", "/usr/bin/python3"])
        .arg(&client)
        .args([
            "--engine",
            "vllm",
            "--yes",
            "--name",
            "py",
            "--timeout",
            "120",
        ])
        .arg("--model")
        .arg(&model)
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the client failed: {}",
        describe(&out)
    );
    let lines: Vec<&str> = printed.lines().collect();
    let position = |what: &dyn Fn(&str) -> bool, name: &str| {
        lines
            .iter()
            .position(|l| what(l))
            .unwrap_or_else(|| panic!("no line {name} in:\n{printed}"))
    };
    let listed = position(&|l| l == "engines installed: (none)", "listing no engine");
    let planned = position(&|l| l == "plan vllm: setup-required", "with the plan");
    let digest = position(
        &|l| {
            l.strip_prefix("digest sha256:")
                .is_some_and(|hex| hex.len() == 64)
        },
        "with the plan digest",
    );
    let operation = position(
        &|l| l.starts_with("operation /org/enginekit/Broker1/operation/op_"),
        "with the operation",
    );
    let pulling = position(
        &|l| l.starts_with("signal Changed pulling-image "),
        "with the pulling-image signal",
    );
    // The engine image's byte progress (after the GPU-check image's).
    let bytes = position(
        &|l| {
            let mut words = l.split_whitespace();
            let (Some("signal"), Some("Progress"), Some(count), Some("bytes")) =
                (words.next(), words.next(), words.next(), words.next())
            else {
                return false;
            };
            if !l.ends_with("the engine image") {
                return false;
            }
            count.split_once('/').is_some_and(|(done, total)| {
                done == total && total.parse::<u64>().is_ok_and(|t| t > 0)
            })
        },
        "with byte progress to the end",
    );
    let ready = position(&|l| l == "phase ready", "with the phase ready");
    let url = position(&|l| l.starts_with("url http://127.0.0.1:"), "with the URL");
    assert!(
        listed < planned
            && planned < digest
            && digest < operation
            && operation < pulling
            && pulling < bytes
            && bytes < ready
            && ready < url,
        "out of order:\n{printed}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("signal Changed ready ")),
        "the ready signal:\n{printed}"
    );
    let base = lines[url].trim_start_matches("url ");
    let models = h.curl(&format!("{base}/models"));
    let body: Value = serde_json::from_slice(&models.stdout).unwrap_or_default();
    assert_eq!(body["data"][0]["id"], "py", "{}", describe(&models));
    assert!(h.host.installation().is_some(), "the installation record");

    // The service owns the session: a second run sees the engine, and Unload ends it.
    let again = Command::new("timeout")
        .args(["60", "/usr/bin/python3"])
        .arg(&client)
        .args(["--engine", "vllm"])
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{}", describe(&again));
    assert!(text.contains("engines installed: vllm"), "{text}");
    assert!(text.contains("plan vllm: supported"), "{text}");
    bus.runtime().block_on(async {
        let conn = bus.connect().await;
        let session =
            zbus::OwnedObjectPath::try_from("/org/enginekit/Broker1/session/py").expect("path");
        conn.call_method(
            Some("org.enginekit.Broker1"),
            "/org/enginekit/Broker1",
            Some("org.enginekit.Broker1"),
            "Unload",
            &(session,),
        )
        .await
        .expect("Unload");
    });
    h.assert_nothing_left("after the Python client's session was unloaded");
}
