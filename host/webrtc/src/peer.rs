use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use rtc::interceptor::Slot;
use rtc::media_stream::MediaStreamTrack;
use rtc::peer_connection::configuration::media_engine::MIME_TYPE_H264;
use rtc::peer_connection::configuration::setting_engine::SctpMaxMessageSize;
use rtc::rtp;
use rtc::rtp::codec::h264::H264Payloader;
use rtc::rtp::packetizer::Payloader;
use rtc::rtp_transceiver::rtp_sender::{
    RTCPFeedback, RTCRtpCodec, RTCRtpCodecParameters, RTCRtpCodingParameters, RTCRtpEncodingParameters, RtpCodecKind,
};
use tokio::sync::mpsc;
use webrtc::data_channel::{DataChannel, DataChannelEvent};
use webrtc::media_stream::track_local::static_rtp::TrackLocalStaticRTP;
use webrtc::media_stream::track_local::{TrackLocal, TrackLocalEvent};
use webrtc::peer_connection::{
    register_default_interceptors, MediaEngine, PeerConnection, PeerConnectionBuilder, PeerConnectionEventHandler,
    RTCConfigurationBuilder, RTCIceGatheringState, RTCIceServer, RTCPeerConnectionState, RTCSessionDescription,
    Registry, SettingEngineBuilder,
};

use crate::keyframe::{is_keyframe_request, KeyframeRequests};
use crate::RtcConfig;

/// RTP payload size: below every path MTU a browser meets, with room for SRTP and extensions.
const RTP_MTU: usize = 1200;
/// H.264's RTP clock.
const VIDEO_CLOCK: u64 = 90_000;
/// The payload type we offer for H.264 (the browser's offer decides the one used).
const H264_PAYLOAD_TYPE: u8 = 102;
/// Data-channel messages waiting for the application; beyond this they are dropped (counted):
/// actions are sent unreliably anyway, and a flood must not grow memory.
const MESSAGE_QUEUE: usize = 256;

/// RTP timestamps for a live track: the time a frame is sent, on the 90 kHz video clock, as a
/// camera stamps its capture time. Not the rollout's frame index: when stale frames are skipped
/// the index jumps ahead of the send time, and the browser's jitter buffer then holds each such
/// frame until its timestamp's turn (measured: p95 motion-to-photon 388 ms beside jobs). A client
/// reads the timestamp back from the frame it shows (`requestVideoFrameCallback`'s
/// `rtpTimestamp`) and matches it to the `frame` message that carries the rollout's index.
#[derive(Debug, Clone, Copy)]
pub struct RtpClock {
    start: Instant,
    last: Option<u32>,
}

impl RtpClock {
    /// A clock whose zero is `start` (the peer's first frame, say).
    pub fn new(start: Instant) -> Self {
        Self { start, last: None }
    }

    /// The timestamp of a frame sent at `now`: strictly after the previous one (wrapping as RTP
    /// does), even for two frames in the same tick.
    pub fn stamp(&mut self, now: Instant) -> u32 {
        let ticks = (now.saturating_duration_since(self.start).as_secs_f64() * VIDEO_CLOCK as f64) as u64 as u32;
        let t = match self.last {
            Some(l) if ticks.wrapping_sub(l) == 0 || ticks.wrapping_sub(l) > u32::MAX / 2 => l.wrapping_add(1),
            _ => ticks,
        };
        self.last = Some(t);
        t
    }
}

/// Why an offer could not be answered.
#[derive(Debug)]
pub enum AnswerError {
    /// The client's offer is unusable (not SDP, no H.264 video it can receive …).
    BadOffer(String),
    /// Our side failed (no socket on the bind address …).
    Failed(String),
}

impl std::fmt::Display for AnswerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnswerError::BadOffer(m) | AnswerError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for AnswerError {}

/// What a peer reports to the application.
#[derive(Debug, Clone, PartialEq)]
pub enum PeerEvent {
    /// ICE and DTLS are up: frames now reach the client.
    Connected,
    /// The client's data channel opened: messages can be sent.
    ChannelOpen,
    /// A data-channel message within the size limit.
    Message(Bytes),
    /// The client lost a picture (PLI or FIR): the next frame should be a keyframe.
    KeyframeRequest,
    /// The connection failed or was closed; `reason` says which.
    Closed(String),
}

/// Counters of one peer, for metrics.
#[derive(Debug, Default)]
pub struct PeerStats {
    /// Video frames written to the track.
    pub frames_sent: AtomicU64,
    /// Bytes of encoded video written to the track.
    pub bytes_sent: AtomicU64,
    /// Data-channel messages received, dropped ones included.
    pub messages: AtomicU64,
    /// Over the size limit, or beyond the queue.
    pub messages_dropped: AtomicU64,
    /// Picture-loss reports (PLI or FIR) from the client.
    pub keyframe_requests: AtomicU64,
}

struct Handler {
    lifecycle: mpsc::UnboundedSender<PeerEvent>,
    messages: mpsc::Sender<Bytes>,
    gathered: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    channel: Arc<Mutex<Option<Arc<dyn DataChannel>>>>,
    stats: Arc<PeerStats>,
    max_message_bytes: usize,
}

#[async_trait::async_trait]
impl PeerConnectionEventHandler for Handler {
    async fn on_ice_gathering_state_change(&self, state: RTCIceGatheringState) {
        if state == RTCIceGatheringState::Complete {
            if let Some(tx) = self.gathered.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
    }

    async fn on_connection_state_change(&self, state: RTCPeerConnectionState) {
        let ev = match state {
            RTCPeerConnectionState::Connected => PeerEvent::Connected,
            RTCPeerConnectionState::Failed => PeerEvent::Closed("the WebRTC connection failed".into()),
            RTCPeerConnectionState::Disconnected => PeerEvent::Closed("the WebRTC peer disconnected".into()),
            RTCPeerConnectionState::Closed => PeerEvent::Closed("the WebRTC connection closed".into()),
            _ => return,
        };
        let _ = self.lifecycle.send(ev);
    }

    async fn on_data_channel(&self, dc: Arc<dyn DataChannel>) {
        // One channel per peer: a second one would be a client bug; the first stays in use.
        if self.channel.lock().unwrap().is_some() {
            let _ = dc.close().await;
            return;
        }
        *self.channel.lock().unwrap() = Some(dc.clone());
        let (lifecycle, messages, stats, max) =
            (self.lifecycle.clone(), self.messages.clone(), self.stats.clone(), self.max_message_bytes);
        tokio::spawn(async move {
            while let Some(ev) = dc.poll().await {
                match ev {
                    DataChannelEvent::OnOpen => {
                        let _ = lifecycle.send(PeerEvent::ChannelOpen);
                    }
                    DataChannelEvent::OnMessage(m) => {
                        stats.messages.fetch_add(1, Ordering::Relaxed);
                        if m.data.len() > max || messages.try_send(m.data.freeze()).is_err() {
                            stats.messages_dropped.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    DataChannelEvent::OnClose => {
                        let _ = lifecycle.send(PeerEvent::Closed("the client closed its data channel".into()));
                        break;
                    }
                    _ => {}
                }
            }
        });
    }
}

/// A peer that sends H.264 frames to one client and exchanges messages with it.
pub struct FramePeer {
    pc: Arc<dyn PeerConnection>,
    track: Arc<TrackLocalStaticRTP>,
    channel: Arc<Mutex<Option<Arc<dyn DataChannel>>>>,
    lifecycle: mpsc::UnboundedReceiver<PeerEvent>,
    messages: mpsc::Receiver<Bytes>,
    payloader: H264Payloader,
    ssrc: u32,
    payload_type: u8,
    seq: u16,
    stats: Arc<PeerStats>,
}

fn h264_codec() -> RTCRtpCodecParameters {
    RTCRtpCodecParameters {
        rtp_codec: RTCRtpCodec {
            mime_type: MIME_TYPE_H264.to_owned(),
            clock_rate: VIDEO_CLOCK as u32,
            channels: 0,
            // Constrained baseline, level 3.1: what openh264 writes and every browser decodes.
            sdp_fmtp_line: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f".to_owned(),
            rtcp_feedback: vec![
                RTCPFeedback { typ: "nack".into(), parameter: String::new() },
                RTCPFeedback { typ: "nack".into(), parameter: "pli".into() },
                RTCPFeedback { typ: "ccm".into(), parameter: "fir".into() },
            ],
        },
        payload_type: H264_PAYLOAD_TYPE,
    }
}

fn random_u32() -> u32 {
    RandomState::new().hash_one(std::time::Instant::now()) as u32
}

impl FramePeer {
    /// Answers a client's offer (an SDP with a receive-only video and, usually, a data channel):
    /// returns the peer and the answer SDP, which carries our gathered candidates.
    pub async fn answer(cfg: &RtcConfig, offer_sdp: &str) -> Result<(FramePeer, String), AnswerError> {
        let offer = RTCSessionDescription::offer(offer_sdp.to_string())
            .map_err(|e| AnswerError::BadOffer(format!("the offer is not a valid SDP: {e}")))?;
        let failed = |e: anyhow::Error| AnswerError::Failed(format!("{e:#}"));
        let codec = h264_codec();
        let mut media = MediaEngine::default();
        media.register_codec(codec.clone(), RtpCodecKind::Video).context("registering H.264").map_err(failed)?;
        let registry = register_default_interceptors(Registry::new(), &mut media)
            .context("setting up RTP interceptors")
            .map_err(failed)?
            .with(Slot::from(14_000), KeyframeRequests::default());
        let config = RTCConfigurationBuilder::new()
            .with_ice_servers(
                cfg.ice_servers
                    .iter()
                    .map(|s| RTCIceServer {
                        urls: s.urls.clone(),
                        username: s.username.clone(),
                        credential: s.credential.clone(),
                    })
                    .collect(),
            )
            .build();
        let (life_tx, lifecycle) = mpsc::unbounded_channel();
        let (msg_tx, messages) = mpsc::channel(MESSAGE_QUEUE);
        let (gathered_tx, gathered) = tokio::sync::oneshot::channel();
        let channel = Arc::new(Mutex::new(None));
        let stats = Arc::new(PeerStats::default());
        let handler = Arc::new(Handler {
            lifecycle: life_tx.clone(),
            messages: msg_tx,
            gathered: Mutex::new(Some(gathered_tx)),
            channel: channel.clone(),
            stats: stats.clone(),
            max_message_bytes: cfg.max_message_bytes,
        });
        // Advertised as the answer's max-message-size: a browser refuses to send more (its
        // `send` throws), so an oversized message never reaches (and never breaks) the channel.
        let settings = SettingEngineBuilder::new()
            .with_sctp_max_message_size(SctpMaxMessageSize::Bounded(cfg.max_message_bytes as u32))
            .build();
        let pc = PeerConnectionBuilder::new()
            .with_configuration(config)
            .with_setting_engine(settings)
            .with_media_engine(media)
            .with_interceptor_registry(registry)
            .with_handler(handler)
            .with_udp_addrs(vec![SocketAddr::new(cfg.bind, 0)])
            .build()
            .await
            .with_context(|| format!("opening a WebRTC peer on {}", cfg.bind))
            .map_err(failed)?;
        let pc: Arc<dyn PeerConnection> = Arc::new(pc);
        let ssrc = random_u32();
        let track = Arc::new(TrackLocalStaticRTP::new(MediaStreamTrack::new(
            "fastvideo".to_string(),
            "fastvideo-video".to_string(),
            "fastvideo world session".to_string(),
            RtpCodecKind::Video,
            vec![RTCRtpEncodingParameters {
                rtp_coding_parameters: RTCRtpCodingParameters { ssrc: Some(ssrc), ..Default::default() },
                codec: codec.rtp_codec.clone(),
                ..Default::default()
            }],
        )));
        let result = async {
            let sender = pc
                .add_track(track.clone() as Arc<dyn TrackLocal>)
                .await
                .map_err(|e| AnswerError::Failed(format!("adding the video track: {e}")))?;
            pc.set_remote_description(offer)
                .await
                .map_err(|e| AnswerError::BadOffer(format!("the offer was refused: {e}")))?;
            let answer = pc
                .create_answer(None)
                .await
                .map_err(|e| AnswerError::BadOffer(format!("no answer to this offer: {e}")))?;
            pc.set_local_description(answer)
                .await
                .map_err(|e| AnswerError::Failed(format!("setting the answer: {e}")))?;
            let _ = tokio::time::timeout(cfg.gather_timeout, gathered).await;
            let local = pc
                .local_description()
                .await
                .ok_or_else(|| AnswerError::Failed("no local description after the answer".into()))?;
            let payload_type = sender
                .get_parameters()
                .await
                .ok()
                .and_then(|p| p.rtp_parameters.codecs.first().map(|c| c.payload_type))
                .ok_or_else(|| AnswerError::BadOffer("the offer has no H.264 video the client can receive".into()))?;
            Ok::<_, AnswerError>((local.sdp, payload_type))
        }
        .await;
        let (sdp, payload_type) = match result {
            Ok(v) => v,
            Err(e) => {
                let _ = pc.close().await;
                return Err(e);
            }
        };
        // Keyframe requests arrive as track events once the track is bound (after the answer).
        let (t, life) = (track.clone(), life_tx);
        let st = stats.clone();
        tokio::spawn(async move {
            while !life.is_closed() {
                match t.poll().await {
                    Some(TrackLocalEvent::OnRtcpPacket(packets)) => {
                        if packets.iter().any(|p| is_keyframe_request(p.as_ref())) {
                            st.keyframe_requests.fetch_add(1, Ordering::Relaxed);
                            let _ = life.send(PeerEvent::KeyframeRequest);
                        }
                    }
                    Some(_) => {}
                    // Not bound yet, or unbound at close.
                    None => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
                }
            }
        });
        let peer = FramePeer {
            pc,
            track,
            channel,
            lifecycle,
            messages,
            payloader: H264Payloader::default(),
            ssrc,
            payload_type,
            seq: random_u32() as u16,
            stats,
        };
        Ok((peer, sdp))
    }

    /// The next event: lifecycle first, then messages. `None` never comes while the peer lives.
    pub async fn next_event(&mut self) -> PeerEvent {
        tokio::select! {
            biased;
            ev = self.lifecycle.recv() => ev.unwrap_or_else(|| PeerEvent::Closed("the WebRTC peer ended".into())),
            m = self.messages.recv() => match m {
                Some(m) => PeerEvent::Message(m),
                None => PeerEvent::Closed("the data channel ended".into()),
            },
        }
    }

    /// Sends one access unit (Annex B) as the frame with this RTP timestamp.
    pub async fn send_frame(&mut self, annex_b: &[u8], rtp_timestamp: u32) -> Result<()> {
        let payloads =
            self.payloader.payload(RTP_MTU, &Bytes::copy_from_slice(annex_b)).context("packetizing H.264")?;
        let n = payloads.len();
        for (i, payload) in payloads.into_iter().enumerate() {
            let header = rtp::header::Header {
                version: 2,
                marker: i + 1 == n,
                payload_type: self.payload_type,
                sequence_number: self.seq,
                timestamp: rtp_timestamp,
                ssrc: self.ssrc,
                ..Default::default()
            };
            self.seq = self.seq.wrapping_add(1);
            self.track.write_rtp(rtp::Packet { header, payload }).await.context("sending a video packet")?;
        }
        self.stats.frames_sent.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_sent.fetch_add(annex_b.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Sends a text message on the client's data channel; `false` when it is not open (yet).
    pub async fn send_text(&self, text: &str) -> bool {
        let dc = self.channel.lock().unwrap().clone();
        match dc {
            Some(dc) => dc.send_text(text).await.is_ok(),
            None => false,
        }
    }

    /// The peer's counters, shared so metrics can read them after it closed.
    pub fn stats(&self) -> &Arc<PeerStats> {
        &self.stats
    }

    /// Closes the connection (the client sees it end).
    pub async fn close(&self) {
        let _ = self.pc.close().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rtp_stamps_follow_the_send_clock_and_always_advance() {
        let t0 = Instant::now();
        let mut c = RtpClock::new(t0);
        assert_eq!(c.stamp(t0), 0);
        // The same instant (or an earlier one) still gets a later stamp.
        assert_eq!(c.stamp(t0), 1);
        assert_eq!(c.stamp(t0), 2);
        assert_eq!(c.stamp(t0 + Duration::from_millis(500)), 45_000);
        assert_eq!(c.stamp(t0 + Duration::from_secs(1)), 90_000);
        // Past u32 it wraps, as RTP timestamps do, and keeps advancing modulo 2^32.
        let mut c = RtpClock::new(t0);
        let a = c.stamp(t0 + Duration::from_secs(47_721)); // 2^32 ticks is 47,721.9 s
        let b = c.stamp(t0 + Duration::from_secs(47_722));
        assert!(a > u32::MAX - 90_000 && b < 90_000, "{a} {b}");
        assert_eq!(b.wrapping_sub(a), 90_000);
    }
}
