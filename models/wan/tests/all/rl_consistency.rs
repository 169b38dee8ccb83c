//! C1 consistency (docs/rl.md): the log-probabilities the engine reports for its `flow_sde`
//! steps agree with a trainer's recomputation from the captured trajectory under the same
//! weights — diffusers' WanTransformer3DModel, transformers' UMT5, Flow-GRPO's formula
//! (examples/rl/fvrl.py), fp32 on CPU. The recomputed values are a fixture
//! (tests/fixtures/make_rl_fixture.py, `rl_c1.safetensors`); this test re-runs the engine on the
//! same request and checks its trajectory and log-probabilities against them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use fastvideo_pipeline::{CancelToken, PipelineRun, Values};
use fastvideo_request::{InputPart, OmniRequest, SamplerKind, TextRole};
use fastvideo_wan::pipeline;
use fastvideo_wan::WanModel;
use tch::{Device, Kind, Tensor};

/// Engine vs trainer log-probability, absolute (per step, mean over latent elements). Measured
/// 2.4e-7 when the fixture was written; both sides are fp32 with different kernels.
const LOG_PROB_TOL: f32 = 1e-5;
/// The engine against its own earlier run: the same code on the same CPU, so only thread
/// scheduling could move a value.
const LATENT_TOL: f64 = 1e-5;

#[test]
fn engine_log_probs_match_the_trainers_recomputation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let fx: HashMap<String, Tensor> =
        Tensor::read_safetensors(dir.join("rl_c1.safetensors")).expect("fixture readable").into_iter().collect();
    let model = WanModel::load(&dir.join("tiny-wan"), Device::Cpu).unwrap();
    // The request of make_rl_fixture.py.
    let mut r = OmniRequest::text_to_video("c1", "a red circle moving left on a white background");
    r.inputs.push(InputPart::Text { text: "blurry".into(), role: TextRole::Negative });
    r.sampling.seed = Some(11);
    r.sampling.sampler = Some(SamplerKind::FlowSde);
    r.sampling.sde_steps = Some(vec![0, 1, 3]);
    r.sampling.noise_level = Some(0.7);
    let d = &mut r.diffusion;
    (d.num_inference_steps, d.guidance_scale, d.shift) = (Some(4), Some(5.0), Some(3.0));
    (d.num_frames, d.height, d.width) = (Some(9), Some(32), Some(32));
    r.outputs.return_trajectory = true;
    let req = r.resolve(&model.limits(), || 0).unwrap();
    let spec = Arc::new(pipeline::text_to_video(&model, pipeline::default_guidance()).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), CancelToken::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    let t = out.trajectory().expect("a trajectory");

    let ints = |name: &str| Vec::<i64>::try_from(&fx[name]).unwrap();
    let floats = |name: &str| Vec::<f32>::try_from(&fx[name].to_kind(Kind::Float)).unwrap();
    assert_eq!(t.sde_steps.iter().map(|&s| s as i64).collect::<Vec<_>>(), ints("trajectory.sde_steps"));
    assert_eq!(t.latent_steps.iter().map(|&s| s as i64).collect::<Vec<_>>(), ints("trajectory.latent_steps"));
    assert_eq!(t.sigmas, floats("trajectory.sigmas"));
    let ours = Tensor::from_slice(&t.latents);
    let want = fx["trajectory.latents"].flatten(0, -1);
    let e = ((&ours - &want).abs().max().double_value(&[])) / want.abs().max().double_value(&[]);
    assert!(e < LATENT_TOL, "trajectory latents moved: relative error {e}");
    let trainer = floats("trainer.log_probs");
    assert_eq!(t.log_probs.len(), trainer.len());
    for (i, (a, b)) in t.log_probs.iter().zip(&trainer).enumerate() {
        assert!((a - b).abs() < LOG_PROB_TOL, "sde step {}: engine {a} vs trainer {b}", t.sde_steps[i]);
    }
}
