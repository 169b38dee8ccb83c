//! A test fixture for rewards on latents: it declares the `score-latents` hook, so the host
//! passes the final latents instead of the video, and scores them by their mean magnitude. It
//! refuses anything that is not 5-D, so a test sees which tensor it was given.

use fastvideo_plugin_sdk::{tensor_ops as ops, Reward, Tensor};

struct LatentMean;

impl Reward for LatentMean {
    fn init(_params: String) -> Result<(), String> {
        Ok(())
    }

    fn score(_prompt: String, latents: &Tensor) -> Result<f32, String> {
        match latents.shape().len() {
            5 => Ok(ops::abs_mean(latents)),
            _ => Err(format!("expected the [1, C, F, H, W] latents, got {:?}", latents.shape())),
        }
    }
}

fastvideo_plugin_sdk::export_reward!(LatentMean);
fastvideo_plugin_sdk::manifest! {
    name: "latent_mean",
    version: "0.1.0",
    kind: reward,
    hooks: [score_latents],
    distribution_altering: false,
    description: "Mean |latent| of the final latents (a test fixture)",
    params_schema: {"type": "object", "properties": {}, "additionalProperties": false},
}
