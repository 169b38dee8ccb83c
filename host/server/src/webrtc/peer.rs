//! One WebRTC peer of a session: the offer answered, then frames out on the video track and
//! messages both ways on the data channel until the session or the client ends.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::Json;
use fastvideo_engine::session::{SessionEvent, STREAM_BUFFER_EVENTS};
use fastvideo_media::LiveH264;
use fastvideo_webrtc::{AnswerError, FramePeer, PeerEvent, RtpClock};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::params::read_body;
use crate::sessions::{caller, check_owner, drain_chunks, plugin_message, take_stream, ClientMessage};
use crate::state::AppState;

/// Frames waiting to be sent, at most: a client that is not connected (yet) or a burst of
/// chunks must not grow memory, and old frames are worth less than new ones.
const MAX_QUEUED_CHUNKS: usize = 3;
/// A client that opened its data channel and then sent nothing (not even a ping) for this long
/// is gone as far as actions go (its channel may have died without a close): the session is
/// closed. The page pings every 5 s.
const SILENCE: Duration = Duration::from_secs(30);
/// At most one error message per this interval to a client sending garbage.
const ERROR_INTERVAL: Duration = Duration::from_millis(200);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offer {
    #[serde(rename = "type")]
    kind: Option<String>,
    sdp: String,
}

/// `POST /v1/sessions/{id}/webrtc`.
pub async fn offer(State(s): State<AppState>, Path(id): Path<String>, req: Request) -> Result<Json<Value>, ApiError> {
    check_owner(&s, &id, caller(&req))?;
    let o: Offer = read_body(req).await?;
    if o.kind.as_deref().is_some_and(|k| k != "offer") {
        return Err(ApiError::field("type", "expected \"offer\" (the server answers; it does not offer)"));
    }
    let rx = take_stream(&s, &id)?;
    match FramePeer::answer(&s.webrtc.config, &o.sdp).await {
        Ok((peer, sdp)) => {
            s.webrtc.metrics.peers.inc();
            tokio::spawn(run(s.clone(), id, rx, peer));
            Ok(Json(json!({"type": "answer", "sdp": sdp})))
        }
        Err(e) => {
            // The session stays open for another try (or the WebSocket).
            s.sessions.put_back(&id, rx);
            Err(match e {
                AnswerError::BadOffer(m) => ApiError::field("sdp", m),
                AnswerError::Failed(m) => ApiError::Internal { code: "webrtc_failed".into(), message: m },
            })
        }
    }
}

struct QueuedFrame {
    chunk: u64,
    frame: u64,
    action_id: u64,
    rgb: Vec<u8>,
    /// When its chunk reached the sender.
    arrived: Instant,
}

enum End {
    /// The session ended on the engine's side; the client is told why.
    Session(String),
    /// The client is gone (or never came): the session is closed for it.
    Client(String),
}

async fn run(s: AppState, id: String, mut rx: mpsc::Receiver<SessionEvent>, mut peer: FramePeer) {
    let m = s.webrtc.metrics.clone();
    m.peers_live.inc();
    s.engine.session_streaming(&id, true);
    let end = drive(&s, &id, &mut rx, &mut peer).await;
    match end {
        End::Session(reason) => {
            let _ = peer.send_text(&json!({"type": "closed", "reason": reason}).to_string()).await;
            // Let the message leave before the connection closes.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        End::Client(reason) => {
            tracing::info!(session = %id, %reason, "WebRTC client gone; closing its session");
            s.engine.close_session(&id, &reason);
        }
    }
    peer.close().await;
    let st = peer.stats();
    m.messages_dropped.inc_by(st.messages_dropped.load(Ordering::Relaxed));
    m.peers_live.dec();
}

async fn drive(s: &AppState, id: &str, rx: &mut mpsc::Receiver<SessionEvent>, peer: &mut FramePeer) -> End {
    let Some(model) = s.engine.session_model().cloned() else { return End::Client("no session model".into()) };
    let m = &s.webrtc.metrics;
    let fps = model.fps().max(1);
    let (width, height) = model.frame_size();
    let frame_bytes = (width * height * 3) as usize;
    let max_queued = MAX_QUEUED_CHUNKS * model.frames_per_chunk().max(1) as usize;
    let idr_frames = (s.webrtc.config.keyframe_interval.as_secs_f64() * fps as f64).round() as u64;
    let mut enc = match LiveH264::new(width, height, fps) {
        Ok(e) => Some(e.with_keyframe_interval(idr_frames)),
        Err(e) => return End::Client(format!("cannot encode this model's frames: {e:#}")),
    };
    let period = Duration::from_secs_f64(1.0 / fps as f64);
    let timeout = s.webrtc.config.connect_timeout;
    let connect_by = Instant::now() + timeout;
    let mut connected = false;
    let mut queue: VecDeque<QueuedFrame> = VecDeque::new();
    let mut next_send = Instant::now();
    // RTP timestamps may start anywhere; this stream's start at the peer's creation.
    let mut clock = RtpClock::new(next_send.into_std());
    // The action of the newest frame queued or sent.
    let mut last_action: Option<u64> = None;
    let mut last_error: Option<Instant> = None;
    let mut heard: Option<Instant> = None;
    // Plugin events of the units run before the data channel opened, sent once it is.
    let mut early: Vec<String> = Vec::new();
    loop {
        let send_due = connected && !queue.is_empty();
        tokio::select! {
            _ = tokio::time::sleep_until(connect_by), if !connected => {
                m.ice_timeouts.inc();
                return End::Client(format!("the WebRTC peer did not connect within {} s", timeout.as_secs_f64()));
            }
            _ = tokio::time::sleep_until(heard.map_or(connect_by, |t| t + SILENCE)), if heard.is_some() => {
                return End::Client(format!("no message from the client for {} s", SILENCE.as_secs()));
            }
            ev = peer.next_event() => match ev {
                PeerEvent::Connected => {
                    connected = true;
                    next_send = Instant::now();
                }
                PeerEvent::ChannelOpen => {
                    heard = Some(Instant::now());
                    let hello = json!({
                        "type": "hello", "session": id, "fps": fps, "width": width, "height": height,
                        "actions": model.actions(), "frames_per_chunk": model.frames_per_chunk(),
                    });
                    peer.send_text(&hello.to_string()).await;
                    for msg in early.drain(..) {
                        peer.send_text(&msg).await;
                    }
                }
                PeerEvent::KeyframeRequest => {
                    m.keyframe_requests.inc();
                    if let Some(e) = enc.as_mut() {
                        e.request_keyframe();
                    }
                }
                PeerEvent::Message(bytes) => {
                    heard = Some(Instant::now());
                    let reply = match ClientMessage::parse(&bytes) {
                        Ok(ClientMessage::Action { action, t }) => match s.engine.session_action(id, &action) {
                            Ok(()) => Some(json!({"type": "ack", "id": action.id, "t": t})),
                            Err(e) => Some(json!({"type": "error", "id": action.id, "message": e.to_string()})),
                        },
                        Ok(ClientMessage::Flush) => {
                            let frames = queue.len();
                            queue.clear();
                            let (chunks, kept) = drain_chunks(rx);
                            for e in kept {
                                match e {
                                    SessionEvent::Plugin(e) => {
                                        if let Some(msg) = plugin_message(&e) {
                                            peer.send_text(&msg).await;
                                        }
                                    }
                                    SessionEvent::Closed { reason } => return End::Session(reason),
                                    SessionEvent::Chunk(_) => {}
                                }
                            }
                            Some(json!({"type": "flushed", "chunks": chunks, "frames": frames}))
                        }
                        Ok(ClientMessage::Ping { t }) => Some(json!({"type": "pong", "t": t})),
                        // The session ends on the engine's side first, so its plugins' last
                        // events (an observer's summary) reach the client before `closed`.
                        Ok(ClientMessage::Close) => {
                            if !s.engine.close_session(id, "closed by the client") {
                                return End::Client("closed by the client".into());
                            }
                            None
                        }
                        Err(e) => {
                            m.bad_messages.inc();
                            let now = Instant::now();
                            if last_error.is_some_and(|t| now - t < ERROR_INTERVAL) {
                                None
                            } else {
                                last_error = Some(now);
                                Some(json!({"type": "error", "message": e}))
                            }
                        }
                    };
                    if let Some(r) = reply {
                        peer.send_text(&r.to_string()).await;
                    }
                }
                PeerEvent::Closed(reason) => return End::Client(reason),
            },
            ev = rx.recv() => match ev {
                Some(SessionEvent::Chunk(c)) => {
                    // Frames still queued from before a new action are stale: the client is
                    // waiting to see the action, so skip straight to the frames made under it.
                    if last_action.is_some_and(|a| a != c.action_id) {
                        m.frames_skipped.inc_by(queue.len() as u64);
                        s.engine.session_frames_skipped(id, queue.len() as u64);
                        queue.clear();
                        // The first frame of the new action goes now, not at the next slot.
                        next_send = next_send.min(Instant::now());
                    }
                    last_action = Some(c.action_id);
                    let arrived = Instant::now();
                    for (i, rgb) in c.video.rgb.chunks(frame_bytes).enumerate() {
                        let frame = c.first_frame + i as u64;
                        queue.push_back(QueuedFrame { chunk: c.index, frame, action_id: c.action_id, rgb: rgb.to_vec(), arrived });
                    }
                    while queue.len() > max_queued {
                        queue.pop_front();
                        m.frames_skipped.inc();
                    }
                }
                Some(SessionEvent::Plugin(e)) => {
                    if let Some(msg) = plugin_message(&e) {
                        if heard.is_some() {
                            peer.send_text(&msg).await;
                        } else if early.len() < STREAM_BUFFER_EVENTS {
                            early.push(msg);
                        }
                    }
                }
                Some(SessionEvent::Closed { reason }) => return End::Session(reason),
                None => return End::Session("closed".into()),
            },
            _ = tokio::time::sleep_until(next_send), if send_due => {
                let f = queue.pop_front().expect("queue is not empty when a send is due");
                // Encoding is CPU work (milliseconds at 832x480): off the async workers, so other
                // sessions' sockets and HTTP requests are not held up behind it.
                let (mut e, rgb) = (enc.take().expect("the encoder is back between frames"), f.rgb);
                let (e, encoded) = match tokio::task::spawn_blocking(move || {
                    let r = e.encode(&rgb);
                    (e, r)
                })
                .await
                {
                    Ok(r) => r,
                    Err(err) => return End::Client(format!("encoding frame {}: {err}", f.frame)),
                };
                enc = Some(e);
                let encoded = match encoded {
                    Ok(e) => e,
                    Err(e) => return End::Client(format!("encoding frame {}: {e:#}", f.frame)),
                };
                let rtp = clock.stamp(Instant::now().into_std());
                if let Err(e) = peer.send_frame(&encoded.annex_b, rtp).await {
                    return End::Client(format!("sending frame {}: {e:#}", f.frame));
                }
                m.frames_sent.inc();
                let ack = json!({"type": "frame", "chunk": f.chunk, "frame": f.frame, "rtp": rtp, "action_id": f.action_id, "keyframe": encoded.keyframe,
                    "queued_ms": (Instant::now() - f.arrived).as_secs_f64() * 1e3});
                peer.send_text(&ack.to_string()).await;
                // Keep the pace; after a stall catch up at most twice as fast, never back to back:
                // two frames inside one display refresh and the browser shows only one of them.
                let now = Instant::now();
                next_send = (next_send + period).max(now + period / 2);
            }
        }
    }
}
