//! World-model sessions over WebRTC (docs/world.md, "WebRTC"). `POST /v1/sessions/{id}/webrtc`
//! takes the client's offer, `{"type": "offer", "sdp"}` with its candidates gathered, and
//! returns `{"type": "answer", "sdp"}` with ours. Frames then go out on an H.264 track at the
//! session's frame rate; frame `n` carries RTP timestamp `n × 90000 / fps`.
//!
//! The data channel is the client's (unordered, no retransmits: a late action is worthless).
//! Client to server: the session stream's messages (`action` with an `id` and the client's
//! clock `t`, `flush`, `ping`, `close`). Server to client: `hello` when it opens, `ack`
//! (`id`, `t`) per action taken, `frame` (`chunk`, `frame`, `rtp`, `action_id`) per frame sent — so the
//! page knows which action the picture on screen reflects — `closed` and `error`.
//!
//! A peer that does not connect within the connect timeout, a vanished tab and a closed data
//! channel all close the session, so no slabs are held for a client that is gone.
//!
//! The server-wide settings and counters (`settings`) are apart from the per-peer work
//! (`peer`), so the server's state holds them without the handler that reads that state.

mod peer;
mod settings;

pub use peer::offer;
pub use settings::{WebRtc, WebRtcMetrics};
