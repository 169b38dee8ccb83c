//! Admission: every refusal (draining, bad or oversized request, full queue, duplicate id)
//! happens in [`Engine::submit`], on the caller's thread, before the executor sees the request.

use std::sync::atomic::Ordering;
use std::time::Instant;

use fastvideo_pipeline::CancelToken;
use fastvideo_request::{OmniEvent, OmniOutput, OmniRequest, ResolvedRequest};
use tokio::sync::{mpsc, oneshot};

use super::command::{Command, Job};
use super::front::Engine;
use crate::cost::CostKey;
use crate::EngineError;

/// A submitted request: its events as they happen, and its final output.
pub struct Handle {
    pub request_id: String,
    /// The request as resolved against the model (defaults filled, seed drawn).
    pub request: ResolvedRequest,
    pub predicted_seconds: f64,
    pub events: mpsc::UnboundedReceiver<OmniEvent>,
    pub output: oneshot::Receiver<Result<OmniOutput, EngineError>>,
}

impl Handle {
    /// Waits for the result, dropping events.
    pub async fn wait(self) -> Result<OmniOutput, EngineError> {
        self.output.await.unwrap_or(Err(EngineError::Stopped))
    }
}

fn random_seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64
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
        let req = match req.resolve(&inner.limits, random_seed) {
            Ok(r) => r,
            Err(e) => return refuse(e.into()),
        };
        if let Err(e) = (inner.check)(&req) {
            return refuse(e.into());
        }
        let key = CostKey::of(&req);
        let (predicted, memory) = {
            let cost = inner.shared.cost.lock().unwrap();
            (cost.request_seconds(&key, req.steps), cost.memory_bytes(&key))
        };
        if memory > inner.cfg.memory_bytes {
            return refuse(EngineError::TooLarge {
                field: "width".into(),
                message: format!(
                    "{}x{}x{} frames needs about {} MiB, more than this server's {} MiB; ask for fewer pixels or frames",
                    req.width,
                    req.height,
                    req.num_frames,
                    memory >> 20,
                    inner.cfg.memory_bytes >> 20
                ),
            });
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
        let job = Job {
            id: request_id.clone(),
            steps_left: req.steps,
            req: Some(req),
            run: None,
            key,
            predicted,
            memory,
            one_shot_spent: 0.0,
            submitted: Instant::now(),
            cancel: CancelToken::default(),
            events: etx,
            done: Some(dtx),
            span,
        };
        if inner.tx.lock().unwrap().send(Command::Submit(Box::new(job))).is_err() {
            inner.shared.release(&request_id);
            return Err(EngineError::Stopped);
        }
        Ok(Handle { request_id, request: resolved, predicted_seconds: predicted, events: erx, output: drx })
    }

    /// Predicted seconds of a request with this shape and step count (for clients and tests).
    pub fn predict(&self, req: &ResolvedRequest) -> f64 {
        self.0.shared.cost.lock().unwrap().request_seconds(&CostKey::of(req), req.steps)
    }
}
