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
    pub(super) model_id: String,
    pub(super) limits: ModelLimits,
    pub(super) check: RequestCheck,
    pub(super) metrics: Metrics,
    pub(super) sessions: Option<Arc<dyn SessionModel>>,
    pub(super) session_shared: Arc<SessionShared>,
    pub(super) weights: Option<WeightUpdates>,
    pub(super) adapters: Option<Arc<AdapterCache>>,
    /// Which weights new requests get; the update lock serializes updates.
    pub(super) serving: Mutex<Option<WeightsInfo>>,
    pub(super) update: tokio::sync::Mutex<()>,
    /// Models served beside the primary one, chosen by a request's `model` (model `i + 1`).
    pub(super) extra: Vec<ExtraModel>,
}

/// A model beside the primary one: what admission needs of it.
pub(super) struct ExtraModel {
    pub(super) id: String,
    pub(super) limits: ModelLimits,
    pub(super) check: RequestCheck,
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
    /// Weight updates, LoRA adapters and sessions stay the primary model's.
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
        let EngineModel { id, limits, spec, device, check, classify, weights, adapters, residency } = model;
        if let Some(a) = &adapters {
            metrics.watch_adapters(a);
        }
        let live_sessions =
            LiveSessions::new(sessions.clone(), device, cfg.session_idle, session_shared.clone(), metrics.clone());
        let mut pipelines = vec![ExecModel { id: id.clone(), spec, classify, residency }];
        let mut extras = Vec::new();
        for m in extra {
            pipelines.push(ExecModel { id: m.id.clone(), spec: m.spec, classify: m.classify, residency: m.residency });
            extras.push(ExtraModel { id: m.id, limits: m.limits, check: m.check });
        }
        Executor::new(pipelines, device, shared.clone(), metrics.clone(), &cfg, live_sessions).spawn(rx);
        Engine(Arc::new(Inner {
            tx: Mutex::new(tx),
            shared,
            cfg,
            model_id: id,
            limits,
            check,
            metrics,
            sessions,
            session_shared,
            weights,
            adapters,
            serving: Mutex::new(None),
            update: tokio::sync::Mutex::new(()),
            extra: extras,
        }))
    }

    /// Every served model's id and limits, the primary first.
    pub fn models(&self) -> Vec<(&str, &ModelLimits)> {
        let mut all = vec![(self.0.model_id.as_str(), &self.0.limits)];
        all.extend(self.0.extra.iter().map(|m| (m.id.as_str(), &m.limits)));
        all
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

    pub fn model_id(&self) -> &str {
        &self.0.model_id
    }

    pub fn limits(&self) -> &ModelLimits {
        &self.0.limits
    }

    pub fn config(&self) -> &EngineConfig {
        &self.0.cfg
    }

    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The LoRA adapters requests may name, if the model takes any.
    pub fn adapters(&self) -> Option<&Arc<AdapterCache>> {
        self.0.adapters.as_ref()
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
