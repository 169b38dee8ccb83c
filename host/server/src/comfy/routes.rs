//! The ComfyUI routes and their handlers (queue, history, node info, system stats, interrupt,
//! features and the WebSocket); `/prompt`'s work is in `prompt`, files in `files`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use super::api::Api;
use super::service::Comfy;
use super::{files, prompt, queue};
use crate::auth::Caller;
use crate::state::AppState;

/// The routes, at `/` and `/api/`.
pub fn routes() -> Router<AppState> {
    let api = Router::new()
        .route("/prompt", post(post_prompt).get(get_prompt))
        .route("/queue", get(get_queue).post(post_queue))
        .route("/history", get(get_history).post(post_history))
        .route("/history/{id}", get(get_history_of))
        .route("/view", get(files::view))
        .route("/upload/image", post(files::upload_image))
        .route("/object_info", get(object_info))
        .route("/object_info/{class}", get(object_info_of))
        .route("/system_stats", get(system_stats))
        .route("/interrupt", post(interrupt))
        .route("/features", get(features))
        .route("/ws", get(ws));
    Router::new().merge(api.clone()).nest("/api", api)
}

fn bad_request(kind: &str, message: &str) -> Response {
    let error = json!({ "type": kind, "message": message, "details": message, "extra_info": {} });
    (StatusCode::BAD_REQUEST, Json(json!({ "error": error, "node_errors": {} }))).into_response()
}

/// A random UUID (v4 layout), as ComfyUI names prompts.
fn uuid() -> String {
    let mut b = [0u8; 16];
    let seed = format!("{:?}:{:?}", std::time::SystemTime::now(), std::thread::current().id());
    b.copy_from_slice(&blake3::hash(format!("{seed}:{}", std::process::id()).as_bytes()).as_bytes()[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

async fn post_prompt(
    Api(c): Api,
    State(s): State<AppState>,
    Extension(who): Extension<Caller>,
    body: Bytes,
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return bad_request("invalid_json", "the body is not JSON");
    };
    let Some(prompt) = body.get("prompt").filter(|p| p.is_object()) else {
        return bad_request("no_prompt", "No prompt provided");
    };
    let front = body.get("front").and_then(Value::as_bool) == Some(true);
    let number = match body.get("number").and_then(Value::as_f64) {
        Some(n) => json!(n),
        None => {
            let n = c.number.fetch_add(1, Ordering::Relaxed) as i64;
            json!(if front { -n } else { n })
        }
    };
    let prompt_id = body.get("prompt_id").and_then(Value::as_str).map(String::from).unwrap_or_else(uuid);
    // Checking reads and decodes the pictures and videos the prompt loads: off the async threads.
    let (c2, s2, p2, id2) = (c.clone(), s.clone(), prompt.clone(), prompt_id.clone());
    let checked = match tokio::task::spawn_blocking(move || prompt::check(&c2, &s2, &p2, &id2)).await {
        // `front`: ahead of the queue in the engine too, as far as the caller's key may go.
        Ok(Ok(mut ch)) => {
            let bound = s.keys.max_priority(who);
            if front && bound > 0 {
                ch.runs.iter_mut().for_each(|(_, r)| r.priority = r.priority.max(bound));
            }
            ch
        }
        Err(e) => {
            let msg = format!("checking the prompt failed: {e}");
            return (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({ "error": msg }))).into_response();
        }
        Ok(Err(r)) => {
            tracing::info!(prompt_id, error = %r.error, "comfyui: invalid prompt");
            return (StatusCode::BAD_REQUEST, Json(json!({ "error": r.error, "node_errors": r.node_errors })))
                .into_response();
        }
    };
    let mut extra_data = body.get("extra_data").cloned().filter(Value::is_object).unwrap_or_else(|| json!({}));
    if let Some(client) = body.get("client_id").filter(|v| v.is_string()) {
        extra_data["client_id"] = client.clone();
    }
    let entry = queue::Entry {
        number: number.clone(),
        prompt_id: prompt_id.clone(),
        prompt: prompt.clone(),
        extra_data,
        outputs: checked.outputs.clone(),
        requests: Vec::new(),
        interrupted: false,
    };
    c.queue.push(entry.clone());
    c.queue.broadcast_status();
    tokio::spawn(prompt::run(c.clone(), s.clone(), entry, checked));
    Json(json!({ "prompt_id": prompt_id, "number": number, "node_errors": {} })).into_response()
}

async fn get_prompt(Api(c): Api) -> Response {
    Json(c.queue.info()).into_response()
}

async fn get_queue(Api(c): Api) -> Response {
    Json(c.queue.queue()).into_response()
}

/// `{"clear": true}` empties the pending queue; `{"delete": [ids]}` removes those.
#[derive(Deserialize, Default)]
struct Clear {
    #[serde(default)]
    clear: bool,
    #[serde(default)]
    delete: Option<Vec<String>>,
}

impl Clear {
    /// Reads the body (nothing to do when it is not one) and applies it with `delete`
    /// (`None` = everything).
    fn apply(body: &Bytes, mut delete: impl FnMut(Option<&[String]>)) {
        let b: Clear = serde_json::from_slice(body).unwrap_or_default();
        if b.clear {
            delete(None);
        }
        if let Some(ids) = &b.delete {
            delete(Some(ids));
        }
    }
}

async fn post_queue(Api(c): Api, body: Bytes) -> Response {
    Clear::apply(&body, |ids| {
        c.queue.delete_pending(ids);
    });
    c.queue.broadcast_status();
    StatusCode::OK.into_response()
}

#[derive(Deserialize)]
struct HistoryQuery {
    max_items: Option<usize>,
    offset: Option<usize>,
}

async fn get_history(Api(c): Api, Query(q): Query<HistoryQuery>) -> Response {
    Json(c.queue.history(q.max_items, q.offset)).into_response()
}

async fn get_history_of(Api(c): Api, Path(id): Path<String>) -> Response {
    Json(c.queue.history_of(&id).map_or_else(|| json!({}), |r| json!({ id: r }))).into_response()
}

async fn post_history(Api(c): Api, body: Bytes) -> Response {
    Clear::apply(&body, |ids| c.queue.delete_history(ids));
    StatusCode::OK.into_response()
}

async fn object_info(Api(c): Api) -> Response {
    Json(c.object_info()).into_response()
}

async fn object_info_of(Api(c): Api, Path(class): Path<String>) -> Response {
    let info = c.object_info().get(&class).cloned();
    Json(info.map_or_else(|| json!({}), |i| json!({ class: i }))).into_response()
}

/// Total and available memory from `/proc/meminfo`, in bytes (0 where unknown).
fn ram() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

async fn system_stats(Api(c): Api) -> Response {
    let (ram_total, ram_free) = ram();
    let d = &c.cfg.device;
    Json(json!({
        "system": {
            // Python's `os.name`, which ComfyUI reports.
            "os": if cfg!(unix) { "posix" } else { "nt" },
            "python_version": "",
            "embedded_python": false,
            "comfyui_version": format!("fastvideo {}", env!("CARGO_PKG_VERSION")),
            "pytorch_version": "",
            "argv": std::env::args().collect::<Vec<_>>(),
            "ram_total": ram_total,
            "ram_free": ram_free,
        },
        "devices": [{
            "name": d.name, "type": d.kind, "index": if d.kind == "cpu" { Value::Null } else { json!(0) },
            "vram_total": d.vram_total, "vram_free": d.vram_free,
            "torch_vram_total": d.vram_total, "torch_vram_free": d.vram_free,
        }],
    }))
    .into_response()
}

async fn interrupt(Api(c): Api, State(s): State<AppState>, body: Bytes) -> Response {
    let id = serde_json::from_slice::<Value>(&body).ok().and_then(|b| b.get("prompt_id")?.as_str().map(String::from));
    for request in c.queue.interrupt(id.as_deref()) {
        s.engine.cancel(&request);
    }
    StatusCode::OK.into_response()
}

/// What we tell clients we support (`/features`, the WebSocket's `feature_flags`).
static FEATURES: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| json!({ "supports_preview_metadata": false, "max_upload_size": 104857600.0 }));

async fn features() -> Json<Value> {
    Json(FEATURES.clone())
}

#[derive(Deserialize)]
struct WsQuery {
    #[serde(rename = "clientId")]
    client_id: Option<String>,
}

async fn ws(Api(c): Api, Query(q): Query<WsQuery>, upgrade: WebSocketUpgrade) -> Response {
    let id = q.client_id.filter(|i| !i.is_empty()).unwrap_or_else(|| uuid().replace('-', ""));
    upgrade.on_upgrade(move |socket| client(c, socket, id))
}

/// Forwards the client's messages until it goes. Of what it sends only a first
/// `feature_flags` message is answered (with ours); the rest is ignored, as ComfyUI does.
async fn client(c: Arc<Comfy>, mut socket: WebSocket, id: String) {
    let mut rx = c.queue.connect(&id);
    let mut first = true;
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(out) => {
                    let msg = match out {
                        queue::WsOut::Text(t) => Message::Text(t.into()),
                        queue::WsOut::Binary(b) => Message::Binary(b.into()),
                    };
                    if socket.send(msg).await.is_err() { break }
                }
                None => break,
            },
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(Message::Text(t))) if std::mem::take(&mut first) => {
                    let flags = serde_json::from_str::<Value>(&t).ok().filter(|v| v["type"] == "feature_flags");
                    if flags.is_some() {
                        let ours = json!({ "type": "feature_flags", "data": FEATURES.clone() });
                        if socket.send(Message::Text(ours.to_string().into())).await.is_err() { break }
                    }
                }
                Some(Ok(_)) => first = false,
            },
        }
    }
    drop(rx);
    c.queue.disconnect(&id);
}
