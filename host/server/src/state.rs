//! [`AppState`], what every handler gets: the engine and the server's services (jobs, session
//! streams, WebRTC, ComfyUI, API keys, metrics). Its own module so handlers read it without
//! going through the crate root, which names the handlers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fastvideo_engine::Engine;
use fastvideo_webrtc::RtcConfig;
use prometheus_client::registry::Registry;

use crate::auth::ApiKeys;
use crate::comfy::{Comfy, ComfyConfig};
use crate::files::store::Files;
use crate::jobs::{Jobs, Retention};
use crate::session_streams::SessionStreams;
use crate::store::Store;
use crate::webhooks::{RetrySchedule, WebhookMetrics, WebhookPolicy, Webhooks};
use crate::webrtc::{WebRtc, WebRtcMetrics};

/// The language model the chat routes serve: its engine model id and chat codec.
pub struct ChatModel {
    pub id: String,
    pub codec: Arc<dyn fastvideo_request::chat::ChatCodec>,
}

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    /// The engine every route submits to.
    pub engine: Engine,
    pub(crate) jobs: Jobs,
    pub(crate) sessions: SessionStreams,
    pub(crate) webrtc: Arc<WebRtc>,
    pub(crate) registry: Arc<Registry>,
    counter: Arc<AtomicU64>,
    pub(crate) keys: Arc<ApiKeys>,
    pub(crate) comfy: Option<Arc<Comfy>>,
    pub(crate) files: Arc<Files>,
    /// Largest request body accepted (uploads, inline pictures and videos).
    pub(crate) body_limit: usize,
    webhook_metrics: WebhookMetrics,
    /// The language model of the chat routes, when the engine serves one.
    pub(crate) chat: Option<Arc<ChatModel>>,
    /// What to say about a request's prompt (a job's `warnings`), per served model id.
    pub(crate) prompt_warnings: BTreeMap<String, PromptWarnings>,
    /// Fields `/v1/models` adds to each model's entry (its numerics), per served model id.
    pub(crate) model_info: BTreeMap<String, serde_json::Value>,
}

/// What a front end says about a request's prompt before it runs (see
/// [`AppState::with_prompt_warnings`]).
pub type PromptWarnings = Arc<dyn Fn(&fastvideo_request::ResolvedRequest) -> Vec<String> + Send + Sync>;

/// The default [`AppState::with_body_limit`]: room for a long input video.
pub const DEFAULT_BODY_LIMIT: usize = 256 << 20;

impl AppState {
    /// A server over `engine`, its metrics registered in `registry` (served at `/metrics`), with
    /// defaults for the rest: no API keys, no job store, no chat model until a `with_*` call
    /// adds one.
    pub fn new(engine: Engine, mut registry: Registry) -> Self {
        let webrtc = WebRtc::new(RtcConfig::default(), WebRtcMetrics::register(&mut registry));
        let webhook_metrics = WebhookMetrics::register(&mut registry);
        Self {
            engine,
            jobs: Jobs::default(),
            sessions: SessionStreams::default(),
            webrtc,
            registry: Arc::new(registry),
            counter: Arc::new(AtomicU64::new(0)),
            keys: Arc::new(ApiKeys::default()),
            comfy: None,
            files: Arc::new(Files::default()),
            body_limit: DEFAULT_BODY_LIMIT,
            webhook_metrics,
            chat: None,
            prompt_warnings: BTreeMap::new(),
            model_info: BTreeMap::new(),
        }
    }

    /// Jobs of each served model (by id) record what `warnings` says about their prompt, e.g.
    /// words the text encoder does not know.
    pub fn with_prompt_warnings(mut self, warnings: BTreeMap<String, PromptWarnings>) -> Self {
        self.prompt_warnings = warnings;
        self
    }

    /// `/v1/models` adds `info[id]`'s fields (precision, lossy paths, quantized weights) to
    /// model `id`'s entry.
    pub fn with_model_info(mut self, info: BTreeMap<String, serde_json::Value>) -> Self {
        self.model_info = info;
        self
    }

    /// What to say about `request`'s prompt on model `model`.
    pub(crate) fn prompt_warnings(&self, model: &str, request: &fastvideo_request::ResolvedRequest) -> Vec<String> {
        self.prompt_warnings.get(model).map(|w| w(request)).unwrap_or_default()
    }

    /// Serves `/v1/chat/completions` and `/v1/completions` with the engine's model `id` (a
    /// language model), whose chat template and tokenizer `codec` holds.
    pub fn with_chat(mut self, id: String, codec: Arc<dyn fastvideo_request::chat::ChatCodec>) -> Self {
        self.chat = Some(Arc::new(ChatModel { id, codec }));
        self
    }

    /// Delivers completion webhooks to URLs under `policy`, signed with `secret` (`whsec_…`).
    /// Call after [`with_job_store`](Self::with_job_store), whose jobs carry them.
    pub fn with_webhooks(
        mut self,
        policy: WebhookPolicy,
        secret: &str,
        schedule: RetrySchedule,
    ) -> Result<Self, String> {
        let hooks = Webhooks::new(policy, secret, schedule, self.webhook_metrics.clone())?;
        self.jobs = self.jobs.clone().with_webhooks(hooks);
        Ok(self)
    }

    /// Keeps `/v1/files` uploads here (on disk when opened on a folder; in memory by default).
    pub fn with_files(mut self, files: Files) -> Self {
        self.files = Arc::new(files);
        self
    }

    /// The largest request body accepted, in bytes (uploads and inline media count).
    pub fn with_body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// Serves ComfyUI's API (`/prompt`, `/ws`, …) with the deploy's translators; without this
    /// those routes answer 404 saying how to turn them on.
    pub fn with_comfyui(mut self, cfg: ComfyConfig) -> Self {
        self.comfy = Some(Comfy::new(cfg));
        self
    }

    /// Keeps jobs in `store` (when given) under `retention`; [`serve`](crate::serve) reads back
    /// what a previous process left there.
    pub fn with_job_store(mut self, store: Option<Store>, retention: Retention) -> Self {
        self.jobs = Jobs::durable(store, retention);
        self
    }

    /// Requires one of these API keys on every route but the probes ([`auth`](crate::auth)).
    pub fn with_api_keys(mut self, keys: ApiKeys) -> Self {
        self.keys = Arc::new(keys);
        self
    }

    /// How WebRTC peers connect (bind address, STUN/TURN servers, timeouts).
    pub fn with_webrtc(mut self, config: RtcConfig) -> Self {
        self.webrtc = WebRtc::new(config, self.webrtc.metrics.clone());
        self
    }

    /// The served model a request's `model` names (none: the primary), with its limits; an
    /// unknown one is a 400 naming `model` and listing the served ones.
    pub(crate) fn model_for(
        &self,
        model: Option<&str>,
    ) -> Result<(String, fastvideo_request::ModelLimits), crate::ApiError> {
        let name = model.unwrap_or(self.engine.model_id());
        match self.engine.limits_of(name) {
            Some(l) => Ok((name.to_string(), l.clone())),
            None => {
                let served: Vec<String> = self.engine.models().iter().map(|(id, _)| format!("`{id}`")).collect();
                Err(crate::ApiError::field(
                    "model",
                    format!(
                        "model: `{name}` is not served here; this server serves {} (GET /v1/models)",
                        served.join(", ")
                    ),
                ))
            }
        }
    }

    /// A fresh, unguessable-enough id: process start entropy plus a counter.
    pub(crate) fn new_id(&self, prefix: &str) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let h = blake3::hash(format!("{t}:{n}:{}", std::process::id()).as_bytes());
        format!("{prefix}_{}", &h.to_hex()[..24])
    }
}
