//! Admission: every refusal (draining, bad or oversized request, full queue, duplicate id)
//! happens in [`Engine::submit`], on the caller's thread, before the executor sees the request.

use std::sync::atomic::Ordering;
use std::time::Instant;

use std::sync::Arc;

use fastvideo_pipeline::{AdapterCache, CancelToken};
use fastvideo_request::{LoraUse, OmniEvent, OmniOutput, OmniRequest, RequestError, ResolvedRequest};
use tokio::sync::{mpsc, oneshot};

use super::command::{Command, Job};
use super::front::Engine;
use crate::cost::CostKey;
use crate::EngineError;

/// A submitted request: its events as they happen, and its final output.
pub struct Handle {
    /// The id the request was submitted with (for `cancel`).
    pub request_id: String,
    /// The request as resolved against the model (defaults filled, seed drawn).
    pub request: ResolvedRequest,
    /// The cost model's estimate of its run time when admitted, alone on the executor.
    pub predicted_seconds: f64,
    /// Its events (progress, previews) as they happen; closed when it ends.
    pub events: mpsc::UnboundedReceiver<OmniEvent>,
    /// Its result, once, when it finishes, fails or is cancelled.
    pub output: oneshot::Receiver<Result<OmniOutput, EngineError>>,
}

impl Handle {
    /// Waits for the result, dropping events.
    pub async fn wait(self) -> Result<OmniOutput, EngineError> {
        self.output.await.unwrap_or(Err(EngineError::Stopped))
    }
}

impl Engine {
    /// Checks and admits a request. Every refusal happens here, before any work.
    pub fn submit(&self, req: OmniRequest) -> Result<Handle, EngineError> {
        let inner = &self.0;
        let refuse = |e: EngineError| {
            inner.metrics.count("rejected");
            Err(e)
        };
        if inner.shared.draining.load(Ordering::SeqCst) {
            return refuse(EngineError::Draining);
        }
        let model = match self.index_of(req.model.as_deref()) {
            Ok(m) => m,
            Err(e) => return refuse(e.into()),
        };
        let served = &inner.models[model];
        let (limits, check) = (&served.limits, &served.check);
        let req = match req.resolve(limits, fastvideo_request::random_seed) {
            Ok(r) => r,
            Err(e) => return refuse(e.into()),
        };
        if let Err(e) = check(&req) {
            return refuse(e.into());
        }
        if !req.lora.is_empty() {
            let checked = match served.adapters.as_ref() {
                Some(cache) => cache.check(&req.lora),
                None => Err(RequestError::new("lora", "this server enables no LoRA adapters")),
            };
            if let Err(e) = checked {
                return refuse(e.into());
            }
        }
        let key = CostKey::of(&req, (served.work)(&req), model as u32);
        let (predicted, memory) = {
            let cost = inner.shared.cost.lock().unwrap();
            (cost.request_seconds(&key, req.steps), cost.memory_bytes(&key))
        };
        if memory > inner.cfg.memory_bytes {
            let (mib, have) = (memory >> 20, inner.cfg.memory_bytes >> 20);
            // Named by what the request sized: its pictures, else its input.
            let (field, message) = if req.width > 0 {
                let m = format!(
                    "{}x{}x{} frames needs about {mib} MiB, more than this server's {have} MiB; ask for fewer pixels or frames",
                    req.width, req.height, req.num_frames
                );
                ("width", m)
            } else {
                ("inputs", format!("{} tokens need about {mib} MiB, more than this server's {have} MiB", key.tokens))
            };
            return refuse(EngineError::TooLarge { field: field.into(), message });
        }
        if let Some(max) = inner.cfg.max_request_seconds {
            if predicted > max {
                return refuse(EngineError::TooLarge {
                    field: "num_inference_steps".into(),
                    message: format!(
                        "predicted to take {predicted:.1} s, more than this server allows ({max:.1} s); ask for fewer steps or pixels"
                    ),
                });
            }
        }
        {
            let mut live = inner.shared.live.lock().unwrap();
            if live.contains(&req.request_id) {
                drop(live);
                return refuse(EngineError::Duplicate(req.request_id));
            }
            if live.len() >= inner.cfg.max_queue {
                let queued = live.len();
                drop(live);
                return refuse(EngineError::QueueFull { queued });
            }
            live.insert(req.request_id.clone());
            inner.shared.live_count.send_replace(live.len());
        }
        inner.metrics.predicted_request_seconds.observe(predicted);
        let (etx, erx) = mpsc::unbounded_channel();
        let (dtx, drx) = oneshot::channel();
        let request_id = req.request_id.clone();
        let span = tracing::info_span!("request", id = %request_id, steps = req.steps, predicted_s = predicted);
        let resolved = req.clone();
        let lora = req.lora.clone();
        let job = Job {
            id: request_id.clone(),
            model,
            steps_left: req.steps,
            req: Some(req),
            run: None,
            restart: None,
            key,
            predicted,
            memory,
            one_shot_spent: 0.0,
            submitted: Instant::now(),
            cancel: CancelToken::default(),
            adapters: None,
            events: etx,
            done: Some(dtx),
            span,
        };
        match (served.adapters.as_ref(), lora.is_empty()) {
            (Some(cache), false) if !cache.all_resident(&lora) => {
                // Reading and preparing adapter files takes a while: on a thread of its own, so
                // neither the caller nor the executor waits; the job is queued once they are ready.
                let (engine, cache) = (self.clone(), Arc::clone(cache));
                std::thread::Builder::new()
                    .name("fastvideo-adapter-load".into())
                    .spawn(move || engine.queue_with_adapters(job, &cache, &lora))
                    .map_err(|e| EngineError::Failed { code: "internal_error".into(), message: e.to_string() })?;
            }
            (Some(cache), false) => self.queue_with_adapters(job, cache, &lora),
            _ if !self.queue(job) => return Err(EngineError::Stopped),
            _ => {}
        }
        Ok(Handle { request_id, request: resolved, predicted_seconds: predicted, events: erx, output: drx })
    }

    /// Sends an admitted job to the executor; `false` when the executor is gone.
    fn queue(&self, job: Job) -> bool {
        let inner = &self.0;
        let id = job.id.clone();
        let sent = inner.tx.lock().unwrap().send(Command::Submit(Box::new(job))).is_ok();
        if !sent {
            inner.shared.release(&id);
        }
        sent
    }

    /// Prepares the job's adapters (reading files the cache does not hold), then queues it; a
    /// load that fails fails the job (`adapter_load_failed`), naming the adapter.
    fn queue_with_adapters(&self, mut job: Job, cache: &AdapterCache, lora: &[LoraUse]) {
        match cache.set_for(lora) {
            Ok(set) => {
                job.adapters = set;
                let _ = self.queue(job);
            }
            Err(e) => {
                self.0.metrics.count("failed");
                self.0.shared.release(&job.id);
                if let Some(done) = job.done.take() {
                    let message = format!("{e:#}");
                    let _ = done.send(Err(EngineError::Failed { code: "adapter_load_failed".into(), message }));
                }
            }
        }
    }

    /// Predicted seconds of a request to the primary model with this shape and step count (for
    /// clients and tests).
    pub fn predict(&self, req: &ResolvedRequest) -> f64 {
        let key = CostKey::of(req, (self.0.models[0].work)(req), 0);
        self.0.shared.cost.lock().unwrap().request_seconds(&key, req.steps)
    }
}
