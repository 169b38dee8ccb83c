//! The ComfyUI prompt queue as ComfyUI's clients see it: pending and running entries, a
//! bounded history, and the WebSocket clients messages go to (by `clientId`, or to all).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{json, Value};
use tokio::sync::mpsc;

/// ComfyUI keeps this many finished prompts (`MAXIMUM_HISTORY_SIZE`).
const MAX_HISTORY: usize = 10_000;

/// A queued or running prompt: ComfyUI's queue tuple and what we track of it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Position (ComfyUI's `number`; negative when queued to the front).
    pub number: Value,
    /// Its id.
    pub prompt_id: String,
    /// The API-format prompt as posted.
    pub prompt: Value,
    /// `extra_data` as posted, with `client_id` in it.
    pub extra_data: Value,
    /// The output nodes it runs.
    pub outputs: Vec<String>,
    /// The engine requests it has submitted (to interrupt them).
    pub requests: Vec<String>,
    /// An interrupt came in; nothing more is submitted.
    pub interrupted: bool,
}

impl Entry {
    /// ComfyUI's queue tuple `[number, prompt_id, prompt, extra_data, outputs_to_execute]`.
    pub fn tuple(&self) -> Value {
        json!([self.number, self.prompt_id, self.prompt, self.extra_data, self.outputs])
    }

    /// The client that posted it, if it said.
    pub fn client_id(&self) -> Option<&str> {
        self.extra_data.get("client_id").and_then(Value::as_str)
    }
}

#[derive(Default)]
struct State {
    pending: Vec<Entry>,
    running: Vec<Entry>,
    /// Oldest first.
    history: VecDeque<(String, Value)>,
    clients: HashMap<String, mpsc::UnboundedSender<WsOut>>,
}

/// The queue, history and clients, behind one lock.
#[derive(Default)]
pub struct Queue {
    state: Mutex<State>,
}

/// `{"type": kind, "data": data}`, ComfyUI's WebSocket message.
fn message(kind: &str, data: &Value) -> WsOut {
    WsOut::Text(json!({ "type": kind, "data": data }).to_string())
}

/// What goes out on a client's WebSocket: JSON messages, and binary preview frames.
#[derive(Clone, Debug)]
pub enum WsOut {
    Text(String),
    Binary(Vec<u8>),
}

/// ComfyUI's binary preview frame: big-endian event type 1 (`PREVIEW_IMAGE`), image type 1
/// (JPEG), then the image.
pub fn preview_frame(jpeg: &[u8]) -> WsOut {
    let mut b = Vec::with_capacity(8 + jpeg.len());
    b.extend(1u32.to_be_bytes());
    b.extend(1u32.to_be_bytes());
    b.extend_from_slice(jpeg);
    WsOut::Binary(b)
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// ComfyUI's `exec_info`: prompts not yet finished.
    pub fn info(&self) -> Value {
        let g = self.lock();
        json!({ "exec_info": { "queue_remaining": g.pending.len() + g.running.len() } })
    }

    /// Sends to one client, or to every client when `to` is `None`.
    pub fn send(&self, kind: &str, data: &Value, to: Option<&str>) {
        self.send_out(message(kind, data), to);
    }

    /// Sends a message (text or binary) to one client, or to every client.
    pub fn send_out(&self, text: WsOut, to: Option<&str>) {
        let mut g = self.lock();
        match to {
            Some(id) => {
                if let Some(tx) = g.clients.get(id) {
                    if tx.send(text).is_err() {
                        g.clients.remove(id);
                    }
                }
            }
            None => g.clients.retain(|_, tx| tx.send(text.clone()).is_ok()),
        }
    }

    /// Tells every client the queue changed (ComfyUI's `status` broadcast).
    pub fn broadcast_status(&self) {
        let info = self.info();
        self.send("status", &json!({ "status": info }), None);
    }

    /// A WebSocket client connected as `id`; its first message is the queue status.
    pub fn connect(&self, id: &str) -> mpsc::UnboundedReceiver<WsOut> {
        let (tx, rx) = mpsc::unbounded_channel();
        let status = json!({ "status": self.info(), "sid": id });
        let _ = tx.send(message("status", &status));
        self.lock().clients.insert(id.to_string(), tx);
        rx
    }

    /// The client `id` went away (only if `rx` was its latest connection).
    pub fn disconnect(&self, id: &str) {
        let mut g = self.lock();
        if g.clients.get(id).is_some_and(|tx| tx.is_closed()) {
            g.clients.remove(id);
        }
    }

    /// Queues `e`; the front when its number is negative, like ComfyUI's heap.
    pub fn push(&self, e: Entry) {
        let mut g = self.lock();
        g.pending.push(e);
        g.pending.sort_by(|a, b| {
            let n = |v: &Value| v.as_f64().unwrap_or(0.0);
            n(&a.number).total_cmp(&n(&b.number))
        });
    }

    /// Moves `id` from pending to running; false when it was deleted from the queue meanwhile.
    pub fn start(&self, id: &str) -> bool {
        let mut g = self.lock();
        let Some(i) = g.pending.iter().position(|e| e.prompt_id == id) else { return false };
        let e = g.pending.remove(i);
        g.running.push(e);
        true
    }

    /// Records an engine request of running prompt `id`; false when it was interrupted.
    pub fn add_request(&self, id: &str, request: &str) -> bool {
        let mut g = self.lock();
        match g.running.iter_mut().find(|e| e.prompt_id == id) {
            Some(e) if !e.interrupted => {
                e.requests.push(request.to_string());
                true
            }
            _ => false,
        }
    }

    /// Ends running prompt `id` with its history record.
    pub fn finish(&self, id: &str, record: Value) {
        let mut g = self.lock();
        g.running.retain(|e| e.prompt_id != id);
        g.history.retain(|(h, _)| h != id);
        g.history.push_back((id.to_string(), record));
        while g.history.len() > MAX_HISTORY {
            g.history.pop_front();
        }
    }

    /// Marks running prompts (`id`, or all) interrupted; returns their engine requests to cancel.
    pub fn interrupt(&self, id: Option<&str>) -> Vec<String> {
        let mut g = self.lock();
        let mut out = Vec::new();
        for e in g.running.iter_mut().filter(|e| id.is_none_or(|id| e.prompt_id == id)) {
            e.interrupted = true;
            out.append(&mut e.requests);
        }
        out
    }

    /// Whether running prompt `id` was interrupted.
    pub fn interrupted(&self, id: &str) -> bool {
        self.lock().running.iter().any(|e| e.prompt_id == id && e.interrupted)
    }

    /// Removes pending prompts (`ids`, or all); returns how many.
    pub fn delete_pending(&self, ids: Option<&[String]>) -> usize {
        let mut g = self.lock();
        let before = g.pending.len();
        g.pending.retain(|e| ids.is_some_and(|ids| !ids.contains(&e.prompt_id)));
        before - g.pending.len()
    }

    /// `GET /queue`.
    pub fn queue(&self) -> Value {
        let g = self.lock();
        json!({
            "queue_running": g.running.iter().map(Entry::tuple).collect::<Vec<_>>(),
            "queue_pending": g.pending.iter().map(Entry::tuple).collect::<Vec<_>>(),
        })
    }

    /// `GET /history`, oldest first like ComfyUI's: with `max_items` alone, the last that many;
    /// with `offset`, that many skipped from the oldest, then up to `max_items`.
    pub fn history(&self, max: Option<usize>, offset: Option<usize>) -> Value {
        let g = self.lock();
        let len = g.history.len();
        let start = match (offset, max) {
            (Some(o), _) => o.min(len),
            (None, Some(m)) => len.saturating_sub(m),
            (None, None) => 0,
        };
        let m: serde_json::Map<String, Value> =
            g.history.iter().skip(start).take(max.unwrap_or(usize::MAX)).map(|(k, v)| (k.clone(), v.clone())).collect();
        Value::Object(m)
    }

    /// One prompt's record.
    pub fn history_of(&self, id: &str) -> Option<Value> {
        self.lock().history.iter().find(|(k, _)| k == id).map(|(_, v)| v.clone())
    }

    /// Deletes history records (`ids`, or all).
    pub fn delete_history(&self, ids: Option<&[String]>) {
        self.lock().history.retain(|(k, _)| ids.is_some_and(|ids| !ids.contains(k)));
    }
}
