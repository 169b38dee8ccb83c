//! The transformer split over simulated ranks (threads of this process on the CPU, exchanging
//! through the in-process group) against the unsharded forward, for every parallel layout:
//! sequence-parallel degrees 2 and 4 (over a token count they do not divide), CFG groups, and
//! both. The default model has 4 heads of 32, 8 blocks. Tolerance: 2e-5 of the output's scale —
//! the ranks run the same arithmetic on fewer rows (float32 GEMMs may round in another order);
//! a misplaced slice, head group or rotary row shows up as an O(1) difference.

use std::path::Path;
use std::sync::Arc;

use fastvideo_parallel::{ParallelMode, ParallelPlan};
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::{Artifact, OmniRequest};
use fastvideo_wan::{pipeline, WanModel};
use tch::{Device, Kind, Tensor};

fn default_model() -> WanModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../default");
    WanModel::load(&dir, Device::Cpu).expect("default model loads")
}

fn parallel(m: &WanModel, gpus: usize, mode: ParallelMode) -> WanModel {
    let plan = ParallelPlan::new(gpus, Some(mode)).unwrap();
    let mut p = m.share();
    p.parallelize(plan, plan.devices(Device::Cpu, 0, true).unwrap()).unwrap();
    p
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[])
}

#[test]
fn every_layout_matches_the_unsharded_forward() {
    let m = default_model();
    let cfg = &m.transformer.cfg;
    tch::manual_seed(7);
    // A 3x5x5 token grid (75 tokens: uneven for 2 and 4 ranks), two rows at different timesteps
    // with different contexts, as a CFG step's batch.
    let latents = Tensor::randn([2, cfg.in_channels, 3, 10, 10], (Kind::Float, Device::Cpu));
    let timestep = Tensor::from_slice(&[700.0f32, 250.0]);
    let context = Tensor::randn([2, 7, cfg.text_dim], (Kind::Float, Device::Cpu));
    let want = m.transformer.forward(&latents, &timestep, &context).unwrap();
    for (gpus, mode) in [(2, ParallelMode::Sp), (4, ParallelMode::Sp), (2, ParallelMode::Cfg), (4, ParallelMode::CfgSp)]
    {
        let p = parallel(&m, gpus, mode);
        let t = p.parallel.as_ref().unwrap();
        let got = t.forward(&latents, &timestep, &context, None).unwrap();
        assert_eq!(got.size(), want.size());
        let err = rel_err(&got, &want);
        assert!(err < 2e-5, "--gpus {gpus} --parallel {mode:?}: relative error {err}");
        // One row (a request without guidance): the second CFG group sits it out.
        let one =
            t.forward(&latents.narrow(0, 0, 1), &timestep.narrow(0, 0, 1), &context.narrow(0, 0, 1), None).unwrap();
        let err = rel_err(&one, &want.narrow(0, 0, 1));
        assert!(err < 2e-5, "--gpus {gpus} --parallel {mode:?}, one row: relative error {err}");
    }
}

#[test]
fn a_degree_that_does_not_divide_the_heads_is_refused() {
    let m = default_model();
    let plan = ParallelPlan::new(3, Some(ParallelMode::Sp)).unwrap();
    let e = m.share().parallelize(plan, vec![Device::Cpu; 3]).unwrap_err().to_string();
    assert!(e.contains("degree of 3") && e.contains("4 attention heads"), "{e}");
}

#[test]
fn a_generation_on_four_ranks_matches_one_device() {
    let m = default_model();
    let generate = |m: &WanModel| {
        let spec = Arc::new(pipeline::text_to_video(m, pipeline::default_guidance()).unwrap());
        let mut r = OmniRequest::text_to_video("p", "a red circle moving left on a white background");
        r.diffusion.height = Some(64);
        r.diffusion.width = Some(64);
        r.diffusion.num_frames = Some(9);
        r.diffusion.num_inference_steps = Some(4);
        r.outputs.return_latents = true;
        r.sampling.seed = Some(3);
        let req = r.resolve(&m.limits(), || 0).unwrap();
        let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
        run.run_to_end(&mut |_| {}).unwrap();
        let out = run.finish(&mut |_| {}).unwrap();
        let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents returned") };
        Tensor::from_slice(&l.data).view(l.shape.as_slice())
    };
    let want = generate(&m);
    let got = generate(&parallel(&m, 4, ParallelMode::CfgSp));
    let err = rel_err(&got, &want);
    // Four steps compound the per-forward rounding a little.
    assert!(err < 1e-4, "cfg+sp on 4 ranks vs one device: relative error {err}");
}
