//! What the engine benches share.

use std::sync::Arc;

use fastvideo_engine::EngineModel;
use fastvideo_wan::{pipeline, WanModel};

/// `model`'s text-to-video pipeline (default guidance) as an engine model with no extra checks.
pub fn text_to_video(model: &WanModel, device: tch::Device) -> anyhow::Result<EngineModel> {
    Ok(EngineModel {
        id: "default".into(),
        limits: model.limits(),
        spec: Arc::new(pipeline::text_to_video(model, pipeline::default_guidance())?),
        device,
        check: Box::new(|_| Ok(())),
        work: fastvideo_wan::work::work(model),
        classify: |_| "pipeline_failed",
        weights: None,
        adapters: None,
        residency: None,
    })
}
