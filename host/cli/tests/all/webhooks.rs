//! Completion webhooks against a real receiver: refused destinations are a 400 naming `webhook`;
//! a delivery whose receiver is down for 30 s, and whose server is SIGKILLed meanwhile, still
//! arrives once the receiver is back, signed per Standard Webhooks (checked here with our own
//! HMAC, not the server's code).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::common::server::{metric, Server};

type Deliveries = Arc<Mutex<Vec<(HeaderMap, Vec<u8>)>>>;

/// An HTTP receiver on `port` recording what it is sent; stops when dropped.
struct Receiver {
    got: Deliveries,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    fn start(port: u16) -> Self {
        let got = Deliveries::default();
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = rt.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port))).expect("the receiver's port");
        let record = got.clone();
        let app = axum::Router::new().route(
            "/hooks/{*rest}",
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| async move {
                record.lock().unwrap().push((headers, body.to_vec()));
                axum::http::StatusCode::NO_CONTENT
            }),
        );
        rt.spawn(async move { axum::serve(listener, app).await });
        Self { got, _rt: rt }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_signed_delivery_survives_a_receiver_outage_and_a_sigkill() {
    let port = free_port();
    let key = [7u8; 32];
    let secret = format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(key));
    let data = tempfile::tempdir().unwrap();
    let secret_file = data.path().join("webhook.secret");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let store = data.path().join("store");
    let allow = format!("http://127.0.0.1:{port}/hooks");
    let args = [
        "--data-dir",
        store.to_str().unwrap(),
        "--webhook-allow",
        &allow,
        "--webhook-secret-file",
        secret_file.to_str().unwrap(),
    ];
    let outage = Instant::now();
    let a = Server::start(&args);
    let body = |webhook: &str| json!({"prompt": "a red circle", "num_inference_steps": 2, "webhook": webhook});
    for (url, why) in [
        (format!("http://127.0.0.1:{}/hooks/x", port.wrapping_add(1)), "not under"),
        (format!("http://127.0.0.1:{port}/hooksx"), "not under"),
        (format!("http://user:pw@127.0.0.1:{port}/hooks/x"), "credentials"),
        ("file:///etc/passwd".to_string(), "scheme"),
    ] {
        let (status, v) = a.post("/v1/videos", body(&url));
        assert_eq!((status, v["error"]["param"].as_str()), (400, Some("webhook")), "{url}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(why), "{url}: {v}");
    }
    let (status, v) = a.post("/v1/videos", body(&format!("{allow}/done?job=1")));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["webhook"]["status"], "pending", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(a.wait_done(&id)["status"], "completed");
    // The first attempts fail (nobody listens); their state is on the job, and in the store.
    wait_for("two failed attempts", Duration::from_secs(30), || {
        a.get(&format!("/v1/videos/{id}")).1["webhook"]["attempts"].as_u64() >= Some(2)
    });
    let w = a.get(&format!("/v1/videos/{id}")).1["webhook"].clone();
    assert_eq!(w["status"], "pending", "{w}");
    assert!(w["last_error"].as_str().is_some() && w["next_attempt_at"].as_u64().is_some(), "{w}");
    drop(a); // SIGKILL, with the retry pending

    let b = Server::start(&args);
    std::thread::sleep(Duration::from_secs(30).saturating_sub(outage.elapsed()));
    let v = b.get(&format!("/v1/videos/{id}")).1;
    assert_eq!(v["webhook"]["status"], "pending", "still retrying after the restart: {v}");
    let receiver = Receiver::start(port);
    wait_for("the delivery", Duration::from_secs(120), || !receiver.got.lock().unwrap().is_empty());

    let (headers, raw) = receiver.got.lock().unwrap()[0].clone();
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let (msg_id, ts) = (header("webhook-id"), header("webhook-timestamp"));
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{msg_id}.{ts}.").as_bytes());
    mac.update(&raw);
    let expected = format!("v1,{}", base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes()));
    assert_eq!(header("webhook-signature"), expected, "the signature verifies");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(now.abs_diff(ts.parse::<u64>().unwrap()) < 300, "a fresh timestamp: {ts}");
    let event: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!((event["type"].as_str(), event["id"].as_str()), (Some("video.completed"), Some(msg_id.as_str())));
    assert_eq!(
        (event["data"]["id"].as_str(), event["data"]["status"].as_str()),
        (Some(id.as_str()), Some("completed"))
    );

    wait_for("the delivered state", Duration::from_secs(10), || {
        b.get(&format!("/v1/videos/{id}")).1["webhook"]["status"] == "delivered"
    });
    let w = b.get(&format!("/v1/videos/{id}")).1["webhook"].clone();
    assert!(w["attempts"].as_u64().unwrap() >= 3 && w["delivered_at"].as_u64().is_some(), "{w}");
    assert_eq!(metric(&b.metrics(), "fastvideo_webhook_delivered_total", None), 1.0);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(receiver.got.lock().unwrap().len(), 1, "delivered once");
}

#[test]
fn a_server_without_an_allowlist_refuses_webhooks() {
    let a = Server::start(&["--ephemeral"]);
    let (status, v) = a.post("/v1/videos", json!({"prompt": "a red circle", "webhook": "https://h.example/x"}));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("webhook")), "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("--webhook-allow"), "{v}");
}
