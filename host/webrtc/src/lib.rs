//! A WebRTC peer for live world-model sessions: the server answers a browser's offer, sends the
//! session's frames on one H.264 video track (RTP timestamps from the rollout, so a client can
//! tell which frame it is showing) and exchanges small messages on a data channel the client
//! opens (actions in, acknowledgements out).
//!
//! Signaling is one HTTP round trip with gathered candidates (no trickle): the client gathers
//! its candidates before it posts the offer, and the answer carries ours. That is what a page
//! on loopback or a LAN needs; STUN/TURN servers in [`RtcConfig`] cover real deployments.
//!
//! This crate knows nothing of sessions or models; `fastvideo-server` wires a peer to one.

#![deny(missing_docs)]

mod config;
mod keyframe;
mod peer;

pub use config::{IceServer, RtcConfig};
pub use peer::{AnswerError, FramePeer, PeerEvent, PeerStats, RtpClock};
