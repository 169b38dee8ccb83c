//! LTX-2's audio-video guidance (`LTX2Pipeline.__call__`) as a stream guider. For each stream
//! the branches' velocities become clean-sample estimates `x0 = x − σ·v`; the guided estimate is
//! the conditional one plus `(G − 1)(c − uncond)` (classifier-free), `S(c − perturbed)`
//! (spatio-temporal: the model's STG blocks skip their self-attention) and `(M − 1)(c −
//! isolated)` (modality: the streams do not see each other); it is rescaled toward the
//! conditional estimate's standard deviation by `R`, and turned back into a velocity.
//!
//! The scales are the request's (`knobs-json`: `guidance_scale` comes in the step context,
//! `audio_guidance_scale`, `stg_scale`, `audio_stg_scale`, `modality_scale`,
//! `audio_modality_scale`, `guidance_rescale`, `audio_guidance_rescale` as the model resolved
//! them); the params may pin any of them for every request. An audio scale of 0 means the
//! video's, as the pipeline's `audio_x = audio_x or x`. A branch whose scale leaves it without
//! effect in both streams is not asked for, so it costs no forward (the unconditional one is
//! always asked for: the video's scale is known only per step).

use std::cell::RefCell;

use fastvideo_plugin_sdk::{tensor_ops as ops, StepContext, StreamGuider, StreamPreds, Tensor};

/// One stream's scales.
#[derive(Clone, Copy, Default)]
struct Scales {
    cfg: Option<f32>,
    stg: f32,
    modality: f32,
    rescale: f32,
}

#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Knobs {
    audio_guidance_scale: Option<f32>,
    stg_scale: Option<f32>,
    audio_stg_scale: Option<f32>,
    modality_scale: Option<f32>,
    audio_modality_scale: Option<f32>,
    guidance_rescale: Option<f32>,
    audio_guidance_rescale: Option<f32>,
}

#[derive(Default)]
struct Plan {
    streams: Vec<String>,
    branches: Vec<String>,
    scales: Vec<Scales>,
}

thread_local! {
    static PLAN: RefCell<Plan> = RefCell::new(Plan::default());
}

/// `knobs` with `params` laid over it (the deploy's pins win); unknown keys refused.
fn merged(params: &str, knobs: &str) -> Result<Knobs, String> {
    let mut k: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(knobs).map_err(|e| format!("ltx2-av: knobs: {e}"))?;
    k.retain(|name, _| name.contains("scale") || name.contains("rescale"));
    let p: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(params).map_err(|e| format!("ltx2-av params: {e}"))?;
    k.extend(p);
    serde_json::from_value(serde_json::Value::Object(k)).map_err(|e| format!("ltx2-av params: {e}"))
}

struct Ltx2Av;

impl StreamGuider for Ltx2Av {
    fn init(params: String, streams: Vec<String>, knobs: String) -> Result<Vec<String>, String> {
        let k = merged(&params, &knobs)?;
        let video = Scales {
            cfg: None,
            stg: k.stg_scale.unwrap_or(1.0),
            modality: k.modality_scale.unwrap_or(3.0),
            rescale: k.guidance_rescale.unwrap_or(0.7),
        };
        let or_video = |a: Option<f32>, default: f32, v: f32| match a.unwrap_or(default) {
            0.0 => v,
            a => a,
        };
        let audio = Scales {
            // 0 means the video's, which is the step context's guidance scale.
            cfg: k.audio_guidance_scale.or(Some(7.0)).filter(|a| *a != 0.0),
            stg: or_video(k.audio_stg_scale, 1.0, video.stg),
            modality: or_video(k.audio_modality_scale, 3.0, video.modality),
            rescale: or_video(k.audio_guidance_rescale, 0.7, video.rescale),
        };
        let scales: Vec<Scales> = streams
            .iter()
            .map(|s| match s.as_str() {
                "audio" => Ok(audio),
                // The video stream's CFG scale is the request's `guidance_scale` (step context).
                "video" => Ok(video),
                other => Err(format!("ltx2-av: a stream named `{other}`; this guider knows `video` and `audio`")),
            })
            .collect::<Result<_, _>>()?;
        let mut branches = vec!["cond".to_string(), "uncond".to_string()];
        if scales.iter().any(|s| s.stg > 0.0) {
            branches.push("perturbed".into());
        }
        if scales.iter().any(|s| s.modality > 1.0) {
            branches.push("isolated".into());
        }
        PLAN.with_borrow_mut(|p| *p = Plan { streams, branches: branches.clone(), scales });
        Ok(branches)
    }

    fn combine(ctx: StepContext, streams: Vec<StreamPreds>) -> Result<Vec<Tensor>, String> {
        PLAN.with_borrow(|plan| {
            streams
                .iter()
                .map(|s| {
                    let i = plan
                        .streams
                        .iter()
                        .position(|n| *n == s.name)
                        .ok_or_else(|| format!("ltx2-av: unknown stream `{}`", s.name))?;
                    guided(&ctx, &plan.branches, plan.scales[i], s)
                })
                .collect()
        })
    }
}

/// One stream's guided velocity.
fn guided(ctx: &StepContext, branches: &[String], s: Scales, stream: &StreamPreds) -> Result<Tensor, String> {
    let sigma = ctx.sigma;
    let x = &stream.latents;
    let pred = |name: &str| branches.iter().position(|b| b == name).map(|i| &stream.preds[i]);
    let x0 = |v: &Tensor| ops::linear_combination(&[x, v], &[1.0, -sigma]);
    let cond = x0(pred("cond").ok_or("ltx2-av: no conditional prediction")?)?;
    let mut terms = vec![cond.share()];
    let mut weights = vec![1.0f32];
    let mut delta = |branch: &str, weight: f32| -> Result<(), String> {
        if let Some(v) = pred(branch) {
            terms.push(ops::sub(&cond, &x0(v)?)?);
            weights.push(weight);
        }
        Ok(())
    };
    delta("uncond", s.cfg.unwrap_or(ctx.guidance_scale) - 1.0)?;
    delta("perturbed", s.stg)?;
    delta("isolated", s.modality - 1.0)?;
    let refs: Vec<&Tensor> = terms.iter().collect();
    let mut g = ops::linear_combination(&refs, &weights)?;
    if s.rescale > 0.0 {
        let ratio = ops::div(&std(&cond)?, &std(&g)?)?;
        g = ops::linear_combination(&[&ops::mul(&g, &ratio)?, &g], &[s.rescale, 1.0 - s.rescale])?;
    }
    Ok(ops::scale(&ops::sub(x, &g)?, 1.0 / sigma))
}

/// The unbiased standard deviation of each sample (every dimension but the first), kept.
fn std(t: &Tensor) -> Result<Tensor, String> {
    let shape = t.shape();
    let dims: Vec<i64> = (1..shape.len() as i64).collect();
    let n: i64 = shape[1..].iter().product();
    let centred = ops::sub(t, &ops::mean(t, &dims, true)?)?;
    Ok(ops::scale(&ops::norm(&centred, 2.0, &dims, true)?, 1.0 / ((n - 1) as f32).sqrt()))
}

fastvideo_plugin_sdk::export_stream_guider!(Ltx2Av);
fastvideo_plugin_sdk::manifest! {
    name: "ltx2-av",
    version: "0.1.0",
    kind: stream_guider,
    hooks: [combine],
    distribution_altering: false,
    description: "LTX-2's audio-video guidance: per-stream CFG, STG, modality guidance and rescale on x0 estimates",
    params_schema: {
        "type": "object",
        "properties": {
            "audio_guidance_scale": { "type": "number", "minimum": 0 },
            "stg_scale": { "type": "number", "minimum": 0 },
            "audio_stg_scale": { "type": "number", "minimum": 0 },
            "modality_scale": { "type": "number", "minimum": 0 },
            "audio_modality_scale": { "type": "number", "minimum": 0 },
            "guidance_rescale": { "type": "number", "minimum": 0, "maximum": 1 },
            "audio_guidance_rescale": { "type": "number", "minimum": 0, "maximum": 1 }
        },
        "additionalProperties": false
    },
}
