//! A small client of the helper for tests and for people: it calls the helper on the system bus
//! as whoever runs it (the integration tests run it as the bench's test users with `setpriv`)
//! and prints one JSON line with the outcome.
//!
//! ```text
//! helper-call start STEP_FILE [--interactive] [--wait] [--leave-after-ms N]
//! helper-call receipt NONCE
//! helper-call cancel JOB_PATH
//! helper-call introspect OBJECT_PATH
//! helper-call serve-trivial BUS_NAME
//! ```
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
        Some("cancel") if args.len() == 2 => cancel(&args[1]).await,
        Some("introspect") if args.len() == 2 => introspect(&args[1]).await,
        Some("serve-trivial") if args.len() == 2 => serve_trivial(&args[1]).await,
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
            proxy.call_with_flags::<_, _, zbus::OwnedObjectPath>("Start", method_flags, &body);
        return match tokio::time::timeout(Duration::from_millis(ms), call).await {
            Err(_) => Ok(json!({"left": true})),
            Ok(Ok(Some(job))) => {
                Err(json!({"error": "answered-before-leaving", "job": job.as_str()}))
            }
            Ok(Ok(None)) => Err(json!({"error": "client", "message": "no reply"})),
            Ok(Err(e)) => Err(error_json(e)),
        };
    }
    let job: zbus::OwnedObjectPath = proxy
        .call_with_flags("Start", method_flags, &(step.as_str(),))
        .await
        .map_err(error_json)?
        .ok_or_else(|| json!({"error": "client", "message": "no reply"}))?;
    let job_proxy = Proxy::new(&conn, NAME, job.as_str(), JOB_IFACE)
        .await
        .map_err(error_json)?;
    let mut receipt = String::new();
    if wait {
        let mut finished = job_proxy
            .receive_signal("Finished")
            .await
            .map_err(error_json)?;
        receipt = job_proxy
            .get_property("Receipt")
            .await
            .map_err(error_json)?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        while receipt.is_empty() && tokio::time::Instant::now() < deadline {
            let _ = tokio::time::timeout(Duration::from_secs(1), finished.next()).await;
            receipt = job_proxy
                .get_property("Receipt")
                .await
                .map_err(error_json)?;
        }
    }
    let state: String = job_proxy.get_property("State").await.map_err(error_json)?;
    Ok(json!({"job": job.as_str(), "state": state, "receipt": receipt}))
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
