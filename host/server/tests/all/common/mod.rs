//! A toy engine to put under the router (its jobs run a few idle steps, then fail: it makes no
//! video), and requests to send it in process.

#![allow(dead_code)] // not every suite uses every helper

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use fastvideo_engine::{Engine, EngineConfig, EngineModel, Metrics};
use fastvideo_pipeline::{LoopStage, LoopState, Node, NodeCtx, PipelineSpec, StepResult, Values};
use fastvideo_request::{ModelLimits, TaskType};
use fastvideo_server::AppState;
use serde_json::Value;
use tower::ServiceExt;

/// A loop of the request's steps, each sleeping this long, that makes nothing: jobs run and then
/// fail at the end, which is enough to see them admitted, listed, polled and cancelled.
pub struct Idle(pub Duration);

impl LoopStage for Idle {
    fn init(&self, ctx: &NodeCtx, _: &mut Values) -> Result<LoopState> {
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(()) })
    }
    fn step(&self, _: &NodeCtx, _: &mut LoopState) -> Result<StepResult> {
        std::thread::sleep(self.0);
        Ok(StepResult { forwards: 1, ..Default::default() })
    }
    fn finalize(&self, _: &NodeCtx, _: LoopState, _: &mut Values) -> Result<()> {
        anyhow::bail!("the toy pipeline makes no video")
    }
}

/// Server state over one engine model `toy-model` with `limits`, whose pipeline is the loop
/// `stage` writing `outputs` (the first is the pipeline's output).
pub fn toy_state(limits: ModelLimits, stage: Arc<dyn LoopStage>, outputs: &[&str]) -> AppState {
    let nodes = vec![Node::looped("denoise", stage, &[], outputs)];
    let spec = PipelineSpec::new("toy", limits.tasks.clone(), nodes, &[], outputs[0]).unwrap();
    let model = EngineModel {
        id: "toy-model".into(),
        limits,
        spec: Arc::new(spec),
        device: tch::Device::Cpu,
        check: Box::new(|_| Ok(())),
        // Wan's count: latent frames (4x temporal stride) times 16-pixel patches.
        work: Arc::new(|r| ((r.num_frames.max(1) - 1) / 4 + 1) as u64 * (r.height / 16) as u64 * (r.width / 16) as u64),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    };
    let mut registry = prometheus_client::registry::Registry::default();
    let engine = Engine::start(model, EngineConfig::default(), Metrics::register(&mut registry));
    AppState::new(engine, registry)
}

/// Server state over the toy model `toy-model`, which takes every media task (so media reach
/// their checks).
pub fn state() -> AppState {
    let tasks = vec![TaskType::T2v, TaskType::T2i, TaskType::I2v, TaskType::V2v];
    toy_state(ModelLimits { tasks, ..ModelLimits::example() }, Arc::new(Idle(Duration::from_millis(5))), &["video"])
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// The status and JSON body (null when not JSON) of `req`.
pub async fn send(app: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let res = app.clone().oneshot(req).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A JSON request (a body given as text, so it may be anything).
pub fn json(method: &str, uri: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder().method(method).uri(uri).header("content-type", "application/json").body(body.into()).unwrap()
}

pub fn get(uri: &str) -> Request<Body> {
    Request::builder().uri(uri).body(Body::empty()).unwrap()
}

pub fn delete(uri: &str) -> Request<Body> {
    Request::builder().method("DELETE").uri(uri).body(Body::empty()).unwrap()
}

/// A multipart form of `(name, file name, bytes)` fields; returns its content type and body.
pub fn form(fields: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "fastvideo-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, file, data) in fields {
        body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes());
        if let Some(f) = file {
            body.extend_from_slice(format!("; filename=\"{f}\"\r\nContent-Type: application/octet-stream").as_bytes());
        }
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub fn multipart(uri: &str, fields: &[(&str, Option<&str>, &[u8])]) -> Request<Body> {
    let (content_type, body) = form(fields);
    Request::builder().method("POST").uri(uri).header("content-type", content_type).body(Body::from(body)).unwrap()
}
