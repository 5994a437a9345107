//! A small client of the helper for tests and for people: it calls the helper on the system bus
//! as whoever runs it (the integration tests run it as the bench's test users with `setpriv`)
//! and prints one JSON line with the outcome.
//!
//! ```text
//! helper-call start STEP_FILE [--interactive] [--wait] [--leave-after-ms N] [--undo]
//! helper-call receipt NONCE
//! helper-call setups
//! helper-call cancel JOB_PATH
//! helper-call introspect OBJECT_PATH
//! helper-call serve-trivial BUS_NAME
//! helper-call get JOB_PATH PROPERTY
//! helper-call watch SECONDS
//! helper-call flood STEP_FILE CALLS CONNECTIONS
//! ```
//! `get` reads one job property. `watch` counts every signal the helper sends that reaches this
//! connection (with a match rule on the helper's name, as any client would subscribe) for
//! SECONDS. `flood` sends CALLS concurrent `Start`s of the same step over CONNECTIONS
//! connections and counts the outcomes by error name.
//! `serve-trivial` owns BUS_NAME on the system bus and serves nothing but the standard
//! interfaces: the peer the activation benchmark compares the helper's cold start with.
//! `--leave-after-ms N` sends `Start` and disconnects N ms later without waiting for the reply
//! (a caller that leaves while polkit decides). Exit status 0 when the call succeeded, 1 when the
//! helper returned an error (printed as `{"error": name, "message": text}`), 2 on usage errors.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};
use zbus::proxy::MethodFlags;
use zbus::{Connection, Proxy};

const NAME: &str = "org.enginekit.Helper1";
const PATH: &str = "/org/enginekit/Helper1";
const IFACE: &str = "org.enginekit.Helper1";
const JOB_IFACE: &str = "org.enginekit.Helper1.Job";

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("start") if args.len() >= 2 => start(&args[1], &args[2..]).await,
        Some("receipt") if args.len() == 2 => receipt(&args[1]).await,
        Some("setups") if args.len() == 1 => setups().await,
        Some("cancel") if args.len() == 2 => cancel(&args[1]).await,
        Some("introspect") if args.len() == 2 => introspect(&args[1]).await,
        Some("serve-trivial") if args.len() == 2 => serve_trivial(&args[1]).await,
        Some("get") if args.len() == 3 => get(&args[1], &args[2]).await,
        Some("watch") if args.len() == 2 => watch(&args[1]).await,
        Some("flood") if args.len() == 4 => flood(&args[1], &args[2], &args[3]).await,
        _ => {
            eprintln!("usage: helper-call start STEP_FILE [--interactive] [--wait] [--leave-after-ms N] | receipt NONCE | cancel JOB | introspect PATH");
            return std::process::ExitCode::from(2);
        }
    };
    match result {
        Ok(value) => {
            println!("{value}");
            std::process::ExitCode::SUCCESS
        }
        Err(value) => {
            println!("{value}");
            std::process::ExitCode::from(1)
        }
    }
}

fn error_json(e: zbus::Error) -> Value {
    match e {
        zbus::Error::MethodError(name, message, _) => {
            json!({"error": name.as_str(), "message": message.unwrap_or_default()})
        }
        // zbus turns the standard org.freedesktop.DBus.Error.* replies into this variant.
        zbus::Error::FDO(e) => {
            use zbus::DBusError;
            json!({"error": e.name().as_str(), "message": e.description().unwrap_or_default()})
        }
        other => json!({"error": "client", "message": other.to_string()}),
    }
}

async fn connect() -> Result<Connection, Value> {
    Connection::system()
        .await
        .map_err(|e| json!({"error": "client", "message": format!("cannot connect: {e}")}))
}

async fn start(file: &str, flags: &[String]) -> Result<Value, Value> {
    let step = std::fs::read(file)
        .map_err(|e| json!({"error": "client", "message": format!("cannot read {file}: {e}")}))?;
    // Sent as read: a step that is not UTF-8 cannot be a D-Bus string, so say so plainly.
    let step = String::from_utf8(step)
        .map_err(|_| json!({"error": "client", "message": "the step file is not UTF-8"}))?;
    let interactive = flags.iter().any(|f| f == "--interactive");
    // `--undo`: the step is an undo step, sent to `Undo` instead.
    let method = match flags.iter().any(|f| f == "--undo") {
        true => "Undo",
        false => "Start",
    };
    let wait = flags.iter().any(|f| f == "--wait");
    let leave_after = flags
        .iter()
        .position(|f| f == "--leave-after-ms")
        .and_then(|i| flags.get(i + 1))
        .and_then(|n| n.parse::<u64>().ok());
    let conn = connect().await?;
    let proxy = Proxy::new(&conn, NAME, PATH, IFACE)
        .await
        .map_err(error_json)?;
    let method_flags = if interactive {
        MethodFlags::ALLOW_INTERACTIVE_AUTH
    } else {
        MethodFlags::empty()
    };
    if let Some(ms) = leave_after {
        let body = (step.as_str(),);
        let call =
            proxy.call_with_flags::<_, _, zbus::OwnedObjectPath>(method, method_flags, &body);
        return match tokio::time::timeout(Duration::from_millis(ms), call).await {
            Err(_) => Ok(json!({"left": true})),
            Ok(Ok(Some(job))) => {
                Err(json!({"error": "answered-before-leaving", "job": job.as_str()}))
            }
            Ok(Ok(None)) => Err(json!({"error": "client", "message": "no reply"})),
            Ok(Err(e)) => Err(error_json(e)),
        };
    }
    // Subscribed before Start, so no signal of the job can be missed however fast it runs.
    let mut signals = if wait {
        let rule = zbus::MatchRule::builder()
            .msg_type(zbus::message::Type::Signal)
            .sender(NAME)
            .build()
            .map_err(error_json)?;
        Some(
            zbus::MessageStream::for_match_rule(rule, &conn, None)
                .await
                .map_err(error_json)?,
        )
    } else {
        None
    };
    let job: zbus::OwnedObjectPath = proxy
        .call_with_flags(method, method_flags, &(step.as_str(),))
        .await
        .map_err(error_json)?
        .ok_or_else(|| json!({"error": "client", "message": "no reply"}))?;
    // Uncached, as the broker reads it: each property read is a call the helper sees.
    let job_proxy: Proxy<'_> = zbus::proxy::Builder::new(&conn)
        .destination(NAME)
        .path(job.as_str())
        .interface(JOB_IFACE)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .map_err(error_json)?;
    let mut receipt = String::new();
    let mut progress_signals = 0u32;
    let mut finished_signal = false;
    if let Some(stream) = signals.as_mut() {
        // A replayed step's job is finished already and sends nothing more.
        receipt = job_proxy
            .get_property("Receipt")
            .await
            .map_err(error_json)?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            let wait = if receipt.is_empty() && !finished_signal {
                deadline
            } else {
                tokio::time::Instant::now() + Duration::from_millis(300)
            };
            let Ok(Some(Ok(message))) = tokio::time::timeout_at(wait, stream.next()).await else {
                break;
            };
            let header = message.header();
            if header.path().map(|p| p.as_str()) != Some(job.as_str()) {
                continue;
            }
            match header.member().map(|m| m.as_str()) {
                Some("Progress") => progress_signals += 1,
                Some("Finished") => finished_signal = true,
                _ => {}
            }
        }
        if receipt.is_empty() {
            receipt = job_proxy
                .get_property("Receipt")
                .await
                .map_err(error_json)?;
        }
    }
    let state: String = job_proxy.get_property("State").await.map_err(error_json)?;
    Ok(
        json!({"job": job.as_str(), "state": state, "receipt": receipt,
              "progress_signals": progress_signals, "finished_signal": finished_signal}),
    )
}

async fn receipt(nonce: &str) -> Result<Value, Value> {
    let conn = connect().await?;
    let proxy = Proxy::new(&conn, NAME, PATH, IFACE)
        .await
        .map_err(error_json)?;
    let receipt: String = proxy
        .call("GetReceipt", &(nonce,))
        .await
        .map_err(error_json)?;
    Ok(json!({"receipt": receipt}))
}

/// `Setups()`: the caller's kept setups, each receipt's exact text.
async fn setups() -> Result<Value, Value> {
    let conn = connect().await?;
    let proxy = Proxy::new(&conn, NAME, PATH, IFACE)
        .await
        .map_err(error_json)?;
    let setups: Vec<String> = proxy.call("Setups", &()).await.map_err(error_json)?;
    Ok(json!({"setups": setups}))
}

async fn cancel(job: &str) -> Result<Value, Value> {
    let conn = connect().await?;
    let proxy = Proxy::new(&conn, NAME, job, JOB_IFACE)
        .await
        .map_err(error_json)?;
    let () = proxy.call("Cancel", &()).await.map_err(error_json)?;
    Ok(json!({"cancelled": true}))
}

async fn introspect(path: &str) -> Result<Value, Value> {
    let conn = connect().await?;
    let proxy = Proxy::new(&conn, NAME, path, "org.freedesktop.DBus.Introspectable")
        .await
        .map_err(error_json)?;
    let xml: String = proxy.call("Introspect", &()).await.map_err(error_json)?;
    Ok(json!({"xml": xml}))
}

async fn get(job: &str, property: &str) -> Result<Value, Value> {
    let conn = connect().await?;
    let proxy = Proxy::new(&conn, NAME, job, "org.freedesktop.DBus.Properties")
        .await
        .map_err(error_json)?;
    let value: zbus::OwnedVariant = proxy
        .call("Get", &(JOB_IFACE, property))
        .await
        .map_err(error_json)?;
    Ok(json!({"value": format!("{value:?}")}))
}

async fn watch(seconds: &str) -> Result<Value, Value> {
    let seconds: u64 = seconds
        .parse()
        .map_err(|_| json!({"error": "client", "message": "SECONDS must be a number"}))?;
    let conn = connect().await?;
    let rule = zbus::MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(NAME)
        .build()
        .map_err(error_json)?;
    let mut stream = zbus::MessageStream::for_match_rule(rule, &conn, None)
        .await
        .map_err(error_json)?;
    println!("{}", json!({"watching": true}));
    let mut members = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while let Ok(Some(message)) = tokio::time::timeout_at(deadline, stream.next()).await {
        if let Ok(message) = message {
            let header = message.header();
            members.push(format!(
                "{}.{}",
                header.interface().map(|i| i.as_str()).unwrap_or("?"),
                header.member().map(|m| m.as_str()).unwrap_or("?")
            ));
        }
    }
    Ok(json!({"signals": members.len(), "members": members}))
}

async fn flood(file: &str, calls: &str, connections: &str) -> Result<Value, Value> {
    let step = std::fs::read_to_string(file)
        .map_err(|e| json!({"error": "client", "message": format!("cannot read {file}: {e}")}))?;
    let (Ok(calls), Ok(connections)) = (calls.parse::<usize>(), connections.parse::<usize>())
    else {
        return Err(json!({"error": "client", "message": "CALLS and CONNECTIONS are numbers"}));
    };
    let mut proxies = Vec::new();
    for _ in 0..connections.max(1) {
        let conn = connect().await?;
        proxies.push(
            Proxy::new(&conn, NAME, PATH, IFACE)
                .await
                .map_err(error_json)?,
        );
    }
    let sent = (0..calls).map(|i| {
        let proxy = &proxies[i % proxies.len()];
        let step = step.as_str();
        async move {
            let reply: zbus::Result<Option<zbus::OwnedObjectPath>> = proxy
                .call_with_flags("Start", MethodFlags::empty(), &(step,))
                .await;
            match reply {
                Ok(_) => "ok".to_owned(),
                Err(zbus::Error::MethodError(name, _, _)) => name.as_str().to_owned(),
                Err(other) => format!("client: {other}"),
            }
        }
    });
    let outcomes = futures_util::future::join_all(sent).await;
    let mut counts = serde_json::Map::new();
    for outcome in outcomes {
        let n = counts.get(&outcome).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(outcome, json!(n + 1));
    }
    Ok(Value::Object(counts))
}

async fn serve_trivial(name: &str) -> Result<Value, Value> {
    // Served before the name is requested, as the helper does, so that the call that caused
    // the activation (queued by the bus until the name is owned) finds the object server.
    let _conn = zbus::connection::Builder::system()
        .serve_at("/", Trivial)
        .name(name)
        .build()
        .await
        .map_err(|e| json!({"error": "client", "message": format!("cannot own {name}: {e}")}))?;
    std::future::pending::<()>().await;
    Ok(json!({}))
}

/// The benchmark peer's object: one method that does nothing.
struct Trivial;

#[zbus::interface(name = "org.enginekit.TestTrivial1")]
impl Trivial {
    fn nothing(&self) {}
}
