//! A world model as the engine's session model: each session is a `task: world` request run
//! through the session pipeline ([`crate::session_loop`]) against one shared key/value pool.

use std::sync::Arc;

use fastvideo_pipeline::kv_pool::{KvPool, PoolStats};
use fastvideo_pipeline::session::{SessionModel, SessionRequest};
use fastvideo_pipeline::{AdapterCache, ClassicCfg, LoopPolicies, PipelineSpec};
use fastvideo_request::{
    Defaults, ModelLimits, OmniRequest, PictureLimits, RequestError, ResolvedRequest, SamplerKind, TaskType,
};
use tch::Device;

pub use crate::session_loop::FirstFrame;
use crate::session_loop::{session_pipeline, NODE};
use crate::world::WorldModel;

/// A world model's live sessions as the engine runs them: the model, its key/value pool and the
/// session pipeline.
pub struct WorldSessions {
    id: String,
    model: Arc<WorldModel>,
    pool: Arc<KvPool>,
    spec: Arc<PipelineSpec>,
    limits: ModelLimits,
    adapters: Option<Arc<AdapterCache>>,
    residency: Option<Arc<dyn fastvideo_pipeline::Residency>>,
}

impl WorldSessions {
    /// Sessions of `model` with a pool sized for `max_sessions` at the model's own size, under
    /// `policies` (a deploy's guider, step interceptor and observers; [`LoopPolicies::new`] with
    /// [`ClassicCfg`] runs the model as it was trained), drawing first frames with
    /// `first_frame` when the model's world has a simulator.
    pub fn new(
        id: String,
        model: Arc<WorldModel>,
        max_sessions: usize,
        device: Device,
        policies: LoopPolicies,
        first_frame: Option<FirstFrame>,
    ) -> anyhow::Result<Self> {
        let spec = &model.spec;
        let sf = model.wan.vae.cfg.spatial_factor();
        let mut cfg = crate::causal::pool_config(
            &model.wan.transformer,
            spec.height as i64 / sf,
            spec.width as i64 / sf,
            device,
            0,
        );
        cfg.budget_bytes = cfg.slab_bytes() * (spec.window * cfg.layers * max_sessions.max(1)) as u64;
        let pool = KvPool::new(cfg);
        let limits = limits(&model);
        let pipeline = Arc::new(session_pipeline(model.clone(), pool.clone(), policies, first_frame)?);
        Ok(Self { id, pool, model, spec: pipeline, limits, adapters: None, residency: None })
    }

    /// The same sessions taking the LoRA adapters of `cache` (prepared for this world model).
    pub fn with_adapters(mut self, cache: Option<Arc<AdapterCache>>) -> Self {
        self.adapters = cache;
        self
    }

    /// Lets the engine put the world model's transformer to sleep while no session runs (under
    /// a residency bound, or by hand). Not with adapters: they merge into the weights in place.
    pub fn with_residency(mut self, residency: Option<Arc<dyn fastvideo_pipeline::Residency>>) -> Self {
        self.residency = residency;
        self
    }

    /// [`new`](Self::new) without a deploy and without a simulator.
    pub fn plain(id: String, model: Arc<WorldModel>, max_sessions: usize, device: Device) -> anyhow::Result<Self> {
        Self::new(id, model, max_sessions, device, LoopPolicies::new(Arc::new(ClassicCfg)), None)
    }

    /// The key/value pool the sessions' windows live in.
    pub fn pool(&self) -> &Arc<KvPool> {
        &self.pool
    }
}

/// What a session request may be: the model's size, frame rate and few-step schedule, no
/// guidance unless asked for.
pub(crate) fn limits(model: &WorldModel) -> ModelLimits {
    let spec = &model.spec;
    let steps = spec.timesteps.len() as u32;
    ModelLimits {
        family: "world model".into(),
        tasks: vec![TaskType::World],
        image_roles: Vec::new(),
        // A session's frames come as it runs; a request picks no count.
        video: None,
        picture: Some(PictureLimits { spatial_multiple: 1, max_side: spec.width.max(spec.height) }),
        audio: None,
        action: None,
        references: None,
        max_steps: steps,
        defaults: Defaults {
            steps,
            guidance_scale: 1.0,
            shift: spec.shift as f32,
            height: spec.height,
            width: spec.width,
            num_frames: 1,
            fps: spec.fps,
            sampler: SamplerKind::Euler,
            negative_prompt: String::new(),
            timesteps: None,
            knobs: Default::default(),
        },
    }
}

impl SessionModel for WorldSessions {
    fn id(&self) -> &str {
        &self.id
    }
    fn actions(&self) -> Vec<String> {
        self.model.actions.cfg.actions.clone()
    }
    fn fps(&self) -> u32 {
        self.model.spec.fps
    }
    fn frames_per_chunk(&self) -> u32 {
        (self.model.wan.vae.cfg.temporal_factor() as usize * self.model.spec.chunk_frames) as u32
    }
    fn frame_size(&self) -> (u32, u32) {
        (self.model.spec.width, self.model.spec.height)
    }
    fn units_per_chunk(&self) -> u32 {
        self.model.spec.timesteps.len() as u32 + 1
    }
    fn kv_stats(&self) -> Option<PoolStats> {
        Some(self.pool.stats())
    }
    fn adapters(&self) -> Option<&Arc<AdapterCache>> {
        self.adapters.as_ref()
    }
    fn residency(&self) -> Option<Arc<dyn fastvideo_pipeline::Residency>> {
        self.residency.clone()
    }
    fn pipeline(&self) -> Arc<PipelineSpec> {
        self.spec.clone()
    }

    fn request(&self, id: &str, req: &SessionRequest) -> Result<ResolvedRequest, RequestError> {
        let spec = &self.model.spec;
        let window = req.window.unwrap_or(spec.window);
        if window <= spec.chunk_frames || window > spec.window {
            return Err(RequestError::new(
                "window",
                format!(
                    "{window} latent frames; this model takes {} to {} (the key/value pool is sized for {})",
                    spec.chunk_frames + 1,
                    spec.window,
                    spec.window
                ),
            ));
        }
        let r = &self.model.wan.load_report;
        let lossy = match (self.model.decoder, fastvideo_torch::lossy_paths(r.fp8_linears, r.int8_attention)) {
            (crate::world::FrameDecoder::Tiny, _) => Some("decodes sessions with the tiny decoder".to_string()),
            (_, paths) if !paths.is_empty() => Some(format!("runs {}", paths.join(", "))),
            _ => None,
        };
        if let (true, Some(what)) = (req.exact, lossy) {
            return Err(RequestError::new(
                "exact",
                format!("this server {what}, a lossy path; exact sessions need a server without it"),
            ));
        }
        let prompt = req.prompt.clone().unwrap_or_else(|| spec.prompt.clone());
        let mut r = OmniRequest::text_to_video(id, prompt);
        r.task = TaskType::World;
        r.sampling.seed = Some(req.seed);
        r.exact = req.exact;
        r.plugin_params = req.plugin_params.clone();
        r.lora = req.lora.clone();
        r.node_params.insert(NODE.into(), serde_json::json!({"window": window, "start_seed": req.start_seed}));
        r.resolve(&self.limits, || req.seed)
    }
}
