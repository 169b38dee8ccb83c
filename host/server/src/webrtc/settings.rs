//! The server's WebRTC settings (bind address, ICE servers, timeouts) and its Prometheus
//! counters, shared by every peer.

use std::sync::Arc;

use fastvideo_webrtc::RtcConfig;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The server's WebRTC counters, for `/metrics`.
#[derive(Clone, Default)]
pub struct WebRtcMetrics {
    /// Peers connected to a session now.
    pub peers_live: Gauge,
    /// Peers answered since start.
    pub peers: Counter,
    /// Peers closed because ICE did not complete within the connect timeout.
    pub ice_timeouts: Counter,
    /// Video frames sent.
    pub frames_sent: Counter,
    /// Queued frames skipped: stale after a new action, or beyond the queue.
    pub frames_skipped: Counter,
    /// Picture-loss requests (PLI or FIR) from clients.
    pub keyframe_requests: Counter,
    /// Data-channel messages over the size limit or beyond the queue.
    pub messages_dropped: Counter,
    /// Messages that were not a valid client message.
    pub bad_messages: Counter,
}

impl WebRtcMetrics {
    /// The counters, registered under `fastvideo_webrtc_*`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let r = registry.sub_registry_with_prefix("fastvideo_webrtc");
        r.register("peers_live", "WebRTC peers connected to a session", m.peers_live.clone());
        r.register("peers", "WebRTC peers answered", m.peers.clone());
        r.register("ice_timeouts", "WebRTC peers closed for not connecting in time", m.ice_timeouts.clone());
        r.register("frames_sent", "Video frames sent over WebRTC", m.frames_sent.clone());
        r.register("frames_skipped", "Frames skipped as stale or beyond the queue", m.frames_skipped.clone());
        r.register("keyframe_requests", "Picture-loss requests from clients", m.keyframe_requests.clone());
        r.register("messages_dropped", "Data-channel messages dropped (size or flood)", m.messages_dropped.clone());
        r.register("bad_messages", "Data-channel messages that were not valid", m.bad_messages.clone());
        m
    }
}

/// The server's WebRTC settings and counters.
pub struct WebRtc {
    /// How peers connect: bind address, ICE servers, timeouts.
    pub config: RtcConfig,
    /// The counters every peer adds to.
    pub metrics: WebRtcMetrics,
}

impl WebRtc {
    /// The settings and counters, shared by every peer.
    pub fn new(config: RtcConfig, metrics: WebRtcMetrics) -> Arc<Self> {
        Arc::new(Self { config, metrics })
    }
}
