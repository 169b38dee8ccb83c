//! Prometheus metrics of the engine (and, registered by the server, of its HTTP side).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabel {
    pub model: String,
}

/// Handles to every engine metric; cheap to clone (each is an `Arc` inside).
#[derive(Clone)]
pub struct Metrics {
    /// Requests admitted and waiting for their first unit of work.
    pub queue_depth: Gauge,
    /// Requests holding state on the executor.
    pub in_flight: Gauge,
    /// Predicted seconds of all work admitted and not yet done.
    pub backlog_seconds: Gauge<f64, AtomicU64>,
    /// Requests by outcome: `completed`, `failed`, `cancelled` or `rejected`.
    pub requests: Family<OutcomeLabel, Counter>,
    /// Per served model: whether its weights are on the device (1) or asleep (0).
    pub model_resident: Family<ModelLabel, Gauge>,
    /// Per served model: how often its weights were brought back to the device.
    pub model_wakes: Family<ModelLabel, Counter>,
    /// Bytes of the weights on the device that may sleep (what `--weight-budget-mib` bounds).
    pub resident_weight_bytes: Gauge,
    /// Wall time of one denoise step (what the cost model learns from).
    pub step_seconds: Histogram,
    /// Requests stepped together by one batched call.
    pub step_batch_size: Histogram,
    /// Wall time of one one-shot stage (text encode, VAE decode …).
    pub one_shot_seconds: Histogram,
    /// The cost model's prediction for each admitted request, to compare with what ran.
    pub predicted_request_seconds: Histogram,
    /// Time from admission to a request's first unit of work.
    pub queue_wait_seconds: Histogram,
    /// Text embeddings served from the cache.
    pub embedding_cache_hits: Counter,
    /// Text embeddings computed (not in the cache).
    pub embedding_cache_misses: Counter,
    /// Wall time spent inside plugin calls (guiders, block interceptors).
    pub plugin_seconds: Counter<f64, AtomicU64>,
    /// Live world-model sessions.
    pub sessions_live: Gauge,
    /// Session chunks generated.
    pub session_chunks: Counter,
    /// Chunks finished more than one chunk period after their deadline.
    pub session_late_chunks: Counter,
    /// Chunks dropped because the client read too slowly.
    pub session_dropped_chunks: Counter,
    /// The world model's key/value pool: slabs held by sessions.
    pub kv_slabs_used: Gauge,
    /// The world model's key/value pool: slabs in all.
    pub kv_slabs_capacity: Gauge,
    /// Frames evicted from session windows since start.
    pub kv_evictions: Gauge,
    /// LoRA adapters found prepared in the adapter cache.
    pub adapter_hits: Counter,
    /// LoRA adapters read, checked and prepared.
    pub adapter_loads: Counter,
    /// LoRA adapters dropped to stay under `--adapter-cache`.
    pub adapter_evictions: Counter,
    /// Seconds spent loading LoRA adapters.
    pub adapter_load_seconds: Counter<f64, AtomicU64>,
    /// Device bytes the adapter cache holds.
    pub adapter_bytes: Gauge,
    /// A language model's paged key/value blocks in the pool.
    pub kv_blocks_total: Gauge,
    /// A language model's paged key/value blocks free now.
    pub kv_blocks_free: Gauge,
    /// Adapters prepared again from the host copy after a device eviction.
    pub adapter_host_hits: Counter,
    /// Adapter sets merged into the weights (every running request had the same set).
    pub adapter_merges: Counter,
}

impl Metrics {
    /// Registers every metric under `fastvideo_` in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            queue_depth: Gauge::default(),
            in_flight: Gauge::default(),
            backlog_seconds: Gauge::default(),
            requests: Family::default(),
            model_resident: Family::default(),
            model_wakes: Family::default(),
            resident_weight_bytes: Gauge::default(),
            step_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            step_batch_size: Histogram::new(exponential_buckets(2.0, 2.0, 6)),
            one_shot_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            predicted_request_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            queue_wait_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
            embedding_cache_hits: Counter::default(),
            embedding_cache_misses: Counter::default(),
            plugin_seconds: Counter::default(),
            sessions_live: Gauge::default(),
            session_chunks: Counter::default(),
            session_late_chunks: Counter::default(),
            session_dropped_chunks: Counter::default(),
            kv_slabs_used: Gauge::default(),
            kv_slabs_capacity: Gauge::default(),
            kv_evictions: Gauge::default(),
            adapter_hits: Counter::default(),
            adapter_loads: Counter::default(),
            adapter_evictions: Counter::default(),
            adapter_load_seconds: Counter::default(),
            adapter_bytes: Gauge::default(),
            kv_blocks_total: Gauge::default(),
            kv_blocks_free: Gauge::default(),
            adapter_host_hits: Counter::default(),
            adapter_merges: Counter::default(),
        };
        let r = registry.sub_registry_with_prefix("fastvideo");
        r.register("queue_depth", "Requests admitted and waiting for their first unit of work", m.queue_depth.clone());
        r.register("in_flight", "Requests holding state on the executor", m.in_flight.clone());
        r.register("backlog_seconds", "Predicted seconds of admitted work not yet done", m.backlog_seconds.clone());
        r.register("requests", "Requests by outcome", m.requests.clone());
        r.register("model_resident", "Whether a served model's weights are on the device", m.model_resident.clone());
        r.register(
            "model_wakes",
            "Times a served model's weights were brought back to the device",
            m.model_wakes.clone(),
        );
        r.register(
            "resident_weight_bytes",
            "Bytes of the device-resident weights of served models that can sleep",
            m.resident_weight_bytes.clone(),
        );
        r.register("step_seconds", "Wall time of one denoise step", m.step_seconds.clone());
        r.register("step_batch_size", "Requests per batched step call", m.step_batch_size.clone());
        r.register("one_shot_seconds", "Wall time of one one-shot stage", m.one_shot_seconds.clone());
        r.register(
            "predicted_request_seconds",
            "Predicted cost of each admitted request",
            m.predicted_request_seconds.clone(),
        );
        r.register("queue_wait_seconds", "Time from admission to first unit of work", m.queue_wait_seconds.clone());
        r.register("embedding_cache_hits", "Text embeddings served from the cache", m.embedding_cache_hits.clone());
        r.register("embedding_cache_misses", "Text embeddings computed", m.embedding_cache_misses.clone());
        r.register("plugin_seconds", "Wall time inside plugin calls", m.plugin_seconds.clone());
        r.register("sessions_live", "Live world-model sessions", m.sessions_live.clone());
        r.register("session_chunks", "Session chunks generated", m.session_chunks.clone());
        r.register(
            "session_late_chunks",
            "Session chunks finished a period past their deadline",
            m.session_late_chunks.clone(),
        );
        r.register(
            "session_dropped_chunks",
            "Session chunks dropped for a slow reader",
            m.session_dropped_chunks.clone(),
        );
        r.register("kv_slabs_used", "Key/value pool slabs held by sessions", m.kv_slabs_used.clone());
        r.register("kv_slabs_capacity", "Key/value pool slabs in all", m.kv_slabs_capacity.clone());
        r.register("kv_evictions", "Frames evicted from session windows since start", m.kv_evictions.clone());
        r.register("adapter_hits", "LoRA adapters found prepared in the adapter cache", m.adapter_hits.clone());
        r.register("adapter_loads", "LoRA adapters read, checked and prepared", m.adapter_loads.clone());
        r.register(
            "adapter_evictions",
            "LoRA adapters dropped to stay under --adapter-cache",
            m.adapter_evictions.clone(),
        );
        r.register("adapter_load_seconds", "Time spent loading LoRA adapters", m.adapter_load_seconds.clone());
        r.register("adapter_bytes", "Device bytes the adapter cache holds", m.adapter_bytes.clone());
        r.register("kv_blocks_total", "Key/value cache blocks of the language model", m.kv_blocks_total.clone());
        r.register("kv_blocks_free", "Key/value cache blocks free now", m.kv_blocks_free.clone());
        r.register(
            "adapter_host_hits",
            "LoRA adapters prepared again from their host copy after a device eviction",
            m.adapter_host_hits.clone(),
        );
        r.register("adapter_merges", "Adapter sets merged into the weights", m.adapter_merges.clone());
        m
    }

    /// Feeds the adapter metrics from `cache`'s events.
    pub fn watch_adapters(&self, cache: &fastvideo_pipeline::AdapterCache) {
        use fastvideo_pipeline::AdapterEvent;
        let m = self.clone();
        cache.observe(Box::new(move |e| match e {
            AdapterEvent::Hit => {
                m.adapter_hits.inc();
            }
            AdapterEvent::Load { bytes, seconds } => {
                m.adapter_loads.inc();
                m.adapter_load_seconds.inc_by(seconds);
                m.adapter_bytes.inc_by(bytes as i64);
            }
            AdapterEvent::Evict { bytes } => {
                m.adapter_evictions.inc();
                m.adapter_bytes.dec_by(bytes as i64);
            }
            AdapterEvent::HostHit => {
                m.adapter_host_hits.inc();
            }
        }));
    }

    /// Publishes a language model's key/value pool: its size, and its free blocks as they change.
    pub fn watch_kv_pool(&self, pool: &fastvideo_pipeline::token::KvBlockPool) {
        self.kv_blocks_total.set(pool.blocks() as i64);
        let free = self.kv_blocks_free.clone();
        pool.observe(Box::new(move |n| {
            free.set(n as i64);
        }));
    }

    /// Records model `model` as on the device or asleep.
    pub fn set_resident(&self, model: &str, on: bool) {
        self.model_resident.get_or_create(&ModelLabel { model: model.to_string() }).set(on as i64);
    }

    /// Counts a request under `outcome` (`completed`, `failed`, `cancelled`, `rejected`).
    pub fn count(&self, outcome: &str) {
        self.requests.get_or_create(&OutcomeLabel { outcome: outcome.to_string() }).inc();
    }
}
