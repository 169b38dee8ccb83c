//! The engine's async front: the cheap handle callers clone, starting the executor behind it, and
//! the controls that need no admission (cancel, drain, idle).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};

use fastvideo_pipeline::AdapterCache;
use fastvideo_request::ModelLimits;
use tokio::sync::watch;

use super::command::Command;
use super::config::EngineConfig;
use super::executor::{ExecModel, Executor};
use super::model::{EngineModel, RequestCheck};
use super::shared::Shared;
use crate::cost::CostModel;
use crate::session::{LiveSessions, SessionModel, SessionShared};
use crate::{EngineError, Metrics, WeightUpdates, WeightsInfo};
use fastvideo_request::RequestError;

pub(super) struct Inner {
    pub(super) tx: Mutex<std_mpsc::Sender<Command>>,
    pub(super) shared: Arc<Shared>,
    pub(super) cfg: EngineConfig,
    pub(super) metrics: Metrics,
    pub(super) sessions: Option<Arc<dyn SessionModel>>,
    pub(super) session_shared: Arc<SessionShared>,
    /// Every served model, the primary (the one a request naming none gets) first; a job's
    /// `model` indexes it.
    pub(super) models: Vec<ServedModel>,
}

/// One served model as admission and the weight routes see it: each carries its own
/// capabilities (adapters, weight updates), whichever slot it fills.
pub(super) struct ServedModel {
    pub(super) id: String,
    pub(super) limits: ModelLimits,
    pub(super) check: RequestCheck,
    pub(super) work: fastvideo_pipeline::WorkCount,
    pub(super) weights: Option<WeightUpdates>,
    pub(super) adapters: Option<Arc<AdapterCache>>,
    /// Which weights new requests get; the update lock serializes updates.
    pub(super) serving: Mutex<Option<WeightsInfo>>,
    pub(super) update: tokio::sync::Mutex<()>,
    /// Whether its weights may leave the device.
    pub(super) sleeps: bool,
}

/// What a served model offers beyond its pipeline, as clients see it in `/v1/capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ModelOffers {
    /// Requests may name LoRA adapters (`lora`).
    pub adapters: bool,
    /// Its weights may be replaced while it serves (`POST /v1/weights`).
    pub weight_updates: bool,
    /// Its weights may sleep off the device (`POST /v1/models/{name}/sleep`).
    pub sleeps: bool,
}

/// The engine: cheap to clone, usable from any thread or task.
#[derive(Clone)]
pub struct Engine(pub(super) Arc<Inner>);

impl Engine {
    /// Starts the executor thread for `model`.
    pub fn start(model: EngineModel, cfg: EngineConfig, metrics: Metrics) -> Self {
        Self::start_with_sessions(model, None, cfg, metrics)
    }

    /// [`start`](Self::start), also serving live sessions of a world model on the same executor.
    pub fn start_with_sessions(
        model: EngineModel,
        sessions: Option<Arc<dyn SessionModel>>,
        cfg: EngineConfig,
        metrics: Metrics,
    ) -> Self {
        Self::start_with_models(model, Vec::new(), sessions, cfg, metrics)
    }

    /// [`start_with_sessions`](Self::start_with_sessions) serving `extra` models too, on the same
    /// executor and scheduler: a request names one by its id in `model` (none: the primary).
    /// Their steps interleave and queue under one policy; only steps of one model batch together.
    /// Each model brings its own adapters and weight updates.
    pub fn start_with_models(
        model: EngineModel,
        extra: Vec<EngineModel>,
        sessions: Option<Arc<dyn SessionModel>>,
        cfg: EngineConfig,
        metrics: Metrics,
    ) -> Self {
        let (tx, rx) = std_mpsc::channel();
        let session_shared = Arc::new(SessionShared::default());
        let shared = Arc::new(Shared {
            live: Mutex::new(HashSet::new()),
            draining: AtomicBool::new(false),
            cost: Mutex::new(CostModel::new(cfg.cost)),
            live_count: watch::channel(0).0,
        });
        let device = model.device;
        let live_sessions =
            LiveSessions::new(sessions.clone(), device, cfg.session_idle, session_shared.clone(), metrics.clone());
        let (mut pipelines, mut models) = (Vec::new(), Vec::new());
        for m in std::iter::once(model).chain(extra) {
            let EngineModel { id, limits, spec, device: _, check, work, classify, weights, adapters, residency } = m;
            if let Some(a) = &adapters {
                metrics.watch_adapters(a);
            }
            let sleeps = residency.is_some();
            pipelines.push(ExecModel { id: id.clone(), spec, classify, residency });
            models.push(ServedModel {
                id,
                limits,
                check,
                work,
                weights,
                adapters,
                serving: Mutex::new(None),
                update: tokio::sync::Mutex::new(()),
                sleeps,
            });
        }
        Executor::new(pipelines, device, shared.clone(), metrics.clone(), &cfg, live_sessions).spawn(rx);
        Engine(Arc::new(Inner { tx: Mutex::new(tx), shared, cfg, metrics, sessions, session_shared, models }))
    }

    /// Every served model's id and limits, the primary first.
    pub fn models(&self) -> Vec<(&str, &ModelLimits)> {
        self.0.models.iter().map(|m| (m.id.as_str(), &m.limits)).collect()
    }

    /// Puts model `id`'s weights to sleep (`false`: off the device, kept in host memory) or wakes
    /// them (`true`), between units of work; answers whether it is resident after. A model with
    /// requests running does not sleep (`Failed` with code `model_busy`); an unknown one is
    /// `Invalid` naming `model`.
    pub async fn set_resident(&self, id: &str, resident: bool) -> Result<bool, EngineError> {
        let world = self.0.sessions.as_ref().filter(|w| w.id() == id);
        let model = match (self.models().iter().position(|(m, _)| *m == id), world) {
            (Some(m), _) => m,
            // The world model's slot follows the video models' when it can sleep.
            (None, Some(w)) if w.residency().is_some() => self.models().len(),
            (None, Some(_)) if resident => return Ok(true),
            (None, Some(_)) => {
                let message = format!("`{id}` cannot sleep (its weights stay resident)");
                return Err(EngineError::Failed { code: "model_busy".into(), message });
            }
            (None, None) => return Err(RequestError::new("model", format!("`{id}` is not served here")).into()),
        };
        let (done, rx) = tokio::sync::oneshot::channel();
        self.0
            .tx
            .lock()
            .unwrap()
            .send(Command::Residency { model, resident, done })
            .map_err(|_| EngineError::Stopped)?;
        match rx.await {
            Ok(Ok(on)) => Ok(on),
            Ok(Err(message)) => Err(EngineError::Failed { code: "model_busy".into(), message }),
            Err(_) => Err(EngineError::Stopped),
        }
    }

    /// The limits of the model named `id`, if it is served.
    pub fn limits_of(&self, id: &str) -> Option<&ModelLimits> {
        self.models().into_iter().find(|(m, _)| *m == id).map(|(_, l)| l)
    }

    /// The primary model's id: what a request that names no model runs on.
    pub fn model_id(&self) -> &str {
        &self.0.models[0].id
    }

    /// The primary model's limits.
    pub fn limits(&self) -> &ModelLimits {
        &self.0.models[0].limits
    }

    /// The settings the engine was started with.
    pub fn config(&self) -> &EngineConfig {
        &self.0.cfg
    }

    /// The engine's counters and gauges, as `/metrics` reports them.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The LoRA adapters requests for model `id` may name (`None`: the primary), if that model
    /// takes any.
    pub fn adapters(&self, id: Option<&str>) -> Option<&Arc<AdapterCache>> {
        self.served(id).ok()?.adapters.as_ref()
    }

    /// What model `id` offers beyond its pipeline; `None` when it is not served here.
    pub fn offers(&self, id: &str) -> Option<ModelOffers> {
        let m = self.0.models.iter().find(|m| m.id == id)?;
        Some(ModelOffers { adapters: m.adapters.is_some(), weight_updates: m.weights.is_some(), sleeps: m.sleeps })
    }

    /// The served model `id` names (`None`: the primary); an unknown id is refused naming
    /// `model` and listing the served ones.
    pub(super) fn served(&self, id: Option<&str>) -> Result<&ServedModel, RequestError> {
        self.index_of(id).map(|i| &self.0.models[i])
    }

    /// The slot of model `id` (`None`: the primary, 0).
    pub(super) fn index_of(&self, id: Option<&str>) -> Result<usize, RequestError> {
        let Some(id) = id else { return Ok(0) };
        self.0.models.iter().position(|m| m.id == id).ok_or_else(|| {
            let served: Vec<String> = self.0.models.iter().map(|m| format!("`{}`", m.id)).collect();
            RequestError::new(
                "model",
                format!("model: `{id}` is not served here; this server serves {}", served.join(", ")),
            )
        })
    }

    /// Cancels a queued or running request at its next unit boundary. `false` when the id is not
    /// live (unknown, or already finished).
    pub fn cancel(&self, request_id: &str) -> bool {
        let live = self.0.shared.live.lock().unwrap().contains(request_id);
        if live {
            let _ = self.0.tx.lock().unwrap().send(Command::Cancel(request_id.to_string()));
        }
        live
    }

    /// Requests queued or running.
    pub fn live(&self) -> usize {
        *self.0.shared.live_count.borrow()
    }

    /// Whether it stopped admitting (`drain` was called).
    pub fn is_draining(&self) -> bool {
        self.0.shared.draining.load(Ordering::SeqCst)
    }

    /// Stops admitting; with `cancel_running`, also cancels everything admitted.
    pub fn drain(&self, cancel_running: bool) {
        self.0.shared.draining.store(true, Ordering::SeqCst);
        if cancel_running {
            let _ = self.0.tx.lock().unwrap().send(Command::CancelAll);
        }
    }

    /// Resolves once no request is queued or running.
    pub async fn idle(&self) {
        let mut rx = self.0.shared.live_count.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}
