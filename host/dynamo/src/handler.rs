//! The Dynamo endpoint handler: a frontend request in, fastvideo's engine (the same step
//! scheduler, plugins and deploy as `fastvideo serve`) does the work, items out — progress
//! items only when the client streams (the frontend folds non-streaming replies from the first
//! item), then the result.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use dynamo_runtime::engine::{AsyncEngine, AsyncEngineContextProvider, DataStream};
use dynamo_runtime::error::{DynamoError, ErrorType};
use dynamo_runtime::pipeline::{ManyOut, ResponseStream, SingleIn};
use dynamo_runtime::protocols::annotated::Annotated;
use fastvideo_engine::{Engine, EngineError, Handle};
use fastvideo_request::{AudioArtifact, OmniEvent, VideoArtifact};
use futures::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::protocol::{self, Kind, Parsed};

/// Where videos asked for as `url` are written, and the URL they are served under.
#[derive(Debug, Clone)]
pub struct Media {
    /// The folder (made if missing).
    pub dir: PathBuf,
    /// The URL prefix of that folder (`file:///…/` by default, or a web server's).
    pub base_url: String,
}

/// Work a worker holds, for its metrics: requests and their predicted seconds.
#[derive(Debug, Default)]
pub struct Load {
    /// Requests admitted and not finished.
    pub live: AtomicU64,
    /// Their predicted seconds, in milliseconds (the cost model's figure).
    pub backlog_ms: AtomicU64,
}

/// Counts a reply as live from its start until its last item is sent (or it fails).
pub(crate) struct Live(Arc<Load>);

impl Live {
    pub(crate) fn new(load: &Arc<Load>) -> Self {
        load.live.fetch_add(1, Ordering::Relaxed);
        Live(load.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One model's endpoint (videos or images) on one engine.
pub struct Handler {
    /// The engine shared by both endpoints.
    pub engine: Engine,
    /// Which protocol this endpoint speaks.
    pub kind: Kind,
    /// Where `url` results go.
    pub media: Media,
    /// Shared with the metrics publisher.
    pub load: Arc<Load>,
}

pub(crate) fn failure(e: DynamoError) -> Annotated<Value> {
    Annotated { data: None, id: None, event: Some("error".into()), comment: None, error: Some(e) }
}

impl Handler {
    /// Runs one request to its end; `progress` gets (step, steps) as they happen.
    async fn run_one(
        &self,
        mut handle: Handle,
        mut progress: impl FnMut(u32, u32),
    ) -> Result<(VideoArtifact, Option<AudioArtifact>), DynamoError> {
        let predicted_ms = (handle.predicted_seconds * 1000.0) as u64;
        self.load.backlog_ms.fetch_add(predicted_ms, Ordering::Relaxed);
        while let Some(ev) = handle.events.recv().await {
            if let OmniEvent::Progress { step, total_steps, .. } = ev {
                progress(step, total_steps);
            }
        }
        let out = handle.output.await.unwrap_or(Err(EngineError::Stopped));
        self.load.backlog_ms.fetch_sub(predicted_ms, Ordering::Relaxed);
        let out = out.map_err(|e| protocol::engine_error(&e))?;
        let video = out
            .video()
            .cloned()
            .ok_or_else(|| protocol::error(ErrorType::Internal, "the pipeline produced no video"))?;
        Ok((video, out.audio().cloned()))
    }

    /// Encodes one result as the frontend wants it.
    async fn encode(
        &self,
        id: &str,
        (video, audio): (VideoArtifact, Option<AudioArtifact>),
        url: bool,
    ) -> Result<Value, DynamoError> {
        let internal = |e: String| protocol::error(ErrorType::Internal, e);
        let kind = self.kind;
        let fps = video.fps;
        let bytes = tokio::task::spawn_blocking(move || match kind {
            Kind::Videos => fastvideo_media::mp4_bytes_with_audio(&video, audio.as_ref()),
            Kind::Images => fastvideo_media::png_bytes(&video, 0),
        })
        .await
        .map_err(|e| internal(e.to_string()))?
        .map_err(|e| internal(format!("encoding: {e:#}")))?;
        let b64 = || base64::engine::general_purpose::STANDARD.encode(&bytes);
        Ok(match (kind, url) {
            (Kind::Images, _) => json!({ "b64_json": b64() }),
            (Kind::Videos, false) => protocol::video_data(None, Some(b64()), fps),
            (Kind::Videos, true) => {
                let name = format!("{}.mp4", id.replace(['/', '\\'], "_"));
                let path = self.media.dir.join(&name);
                tokio::fs::write(&path, &bytes).await.map_err(|e| internal(format!("{}: {e}", path.display())))?;
                protocol::video_data(Some(format!("{}{name}", self.media.base_url)), None, fps)
            }
        })
    }

    /// The whole reply of a checked request, as items.
    async fn reply(
        self: Arc<Self>,
        id: String,
        parsed: Parsed,
        tx: tokio::sync::mpsc::UnboundedSender<Annotated<Value>>,
        _done: tokio::sync::oneshot::Sender<()>,
    ) {
        let _live = Live::new(&self.load);
        let created = protocol::now();
        let model =
            parsed.requests.first().and_then(|r| r.model.clone()).unwrap_or_else(|| self.engine.model_id().to_string());
        let mut data = Vec::new();
        for req in parsed.requests {
            // An admission error about `inputs[i]` names the API field (`input_reference`, …).
            let names = fastvideo_server::MediaNames::of(&req);
            let handle = match self.engine.submit(req) {
                Ok(h) => h,
                Err(e) => {
                    let _ = tx.send(failure(protocol::engine_error(&names.rename(e))));
                    return;
                }
            };
            let rid = handle.request_id.clone();
            let progress = |step: u32, steps: u32| {
                if parsed.stream {
                    let pct = (step * 100 / steps.max(1)).min(99);
                    let _ = tx.send(Annotated::from_data(protocol::video_item(&id, &model, created, pct, Vec::new())));
                }
            };
            let result = match self.run_one(handle, progress).await {
                Ok(video) => self.encode(&rid, video, parsed.url).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(d) => data.push(d),
                Err(e) => {
                    let _ = tx.send(failure(e));
                    return;
                }
            }
        }
        let item = match self.kind {
            Kind::Videos => protocol::video_item(&id, &model, created, 100, data),
            Kind::Images => protocol::images_item(created, data),
        };
        let _ = tx.send(Annotated::from_data(item));
    }
}

/// Both endpoints share one engine; this is one of them.
#[derive(Clone)]
pub struct Endpoint(pub Arc<Handler>);

/// Request ids for canary probes.
static PROBES: AtomicU64 = AtomicU64::new(0);

#[async_trait]
impl AsyncEngine<SingleIn<Value>, ManyOut<Annotated<Value>>, anyhow::Error> for Endpoint {
    async fn generate(&self, input: SingleIn<Value>) -> anyhow::Result<ManyOut<Annotated<Value>>> {
        let ctx = input.context();
        let (request, _) = input.into_parts();
        let h = &self.0;
        let id = ctx.id().to_string();
        // The model card the frontend routed by: one of the served models (else the primary,
        // whose check then names the mismatch).
        let asked = request.get("model").and_then(Value::as_str).filter(|m| h.engine.limits_of(m).is_some());
        let model = asked.unwrap_or(h.engine.model_id()).to_string();
        let limits = h.engine.limits_of(&model).unwrap_or(h.engine.limits()).clone();
        let parsed = protocol::parse(h.kind, &request, &id, &model, &limits).map(|mut p| {
            for r in &mut p.requests {
                r.model = (model != h.engine.model_id()).then(|| model.clone());
            }
            p
        });
        let stream: DataStream<Annotated<Value>> = match parsed {
            Err(e) => Box::pin(stream::once(async move { failure(e) })),
            // Dynamo's canary: a tiny request (the endpoint's health-check payload). Its
            // first item must come within seconds, so it is the admission's answer; the run
            // itself (at the front of the queue) follows.
            Ok(mut p) if p.health_check => {
                let mut req = p.requests.swap_remove(0);
                req.request_id = format!("{id}-health-{}", PROBES.fetch_add(1, Ordering::Relaxed));
                req.priority = i32::MAX;
                match h.engine.submit(req) {
                    Err(e) => Box::pin(stream::once(async move { failure(protocol::engine_error(&e)) })),
                    Ok(handle) => {
                        let first = Annotated::from_data(json!({ "id": handle.request_id, "status": "in_progress" }));
                        let last = async move {
                            let done = handle.wait().await.is_ok();
                            Annotated::from_data(json!({ "status": if done { "completed" } else { "failed" } }))
                        };
                        Box::pin(stream::once(async move { first }).chain(stream::once(last)))
                    }
                }
            }
            Ok(p) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let handler = self.0.clone();
                let ctx2 = ctx.clone();
                let ids: Vec<String> = p.requests.iter().map(|r| r.request_id.clone()).collect();
                let engine = handler.engine.clone();
                // A client that goes away cancels its requests; the watch ends with the reply.
                let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = ctx2.stopped() => for i in &ids {
                            engine.cancel(i);
                        },
                        _ = done_rx => {}
                    }
                });
                tokio::spawn(handler.reply(id, p, tx, done_tx));
                Box::pin(stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|v| (v, rx)) }))
            }
        };
        Ok(ResponseStream::new(stream, ctx))
    }
}
