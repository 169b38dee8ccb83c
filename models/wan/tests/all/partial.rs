//! Partial schedules (`diffusion.start_step`, `end_step`): a run that stops early keeps its
//! leftover noise, exactly the latents the whole run had at that step; a second run started
//! there from them (no noise added) finishes as the whole run does. With a one-step solver
//! (Euler) the split is exact; a multistep one (UniPC) restarts its history, as ComfyUI's chained
//! samplers do.

use std::path::Path;
use std::sync::Arc;

use fastvideo_pipeline::{PipelineRun, Value, Values};
use fastvideo_request::{Artifact, OmniRequest, SamplerKind};
use fastvideo_wan::pipeline::{self, values};
use fastvideo_wan::WanModel;
use tch::{Device, Tensor};

fn model() -> WanModel {
    WanModel::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan"), Device::Cpu).unwrap()
}

fn request(start: Option<u32>, end: Option<u32>, with_latents: bool) -> OmniRequest {
    let mut r = OmniRequest::text_to_video("partial", "a red circle moving left on a white background");
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(5);
    r.diffusion.num_inference_steps = Some(6);
    r.diffusion.guidance_scale = Some(4.0);
    r.sampling.sampler = Some(SamplerKind::Euler);
    r.sampling.seed = Some(9);
    r.outputs.return_latents = true;
    r.outputs.return_trajectory = true;
    (r.diffusion.start_step, r.diffusion.end_step) = (start, end);
    if with_latents {
        r.inputs.push(fastvideo_request::InputPart::Latent {
            name: None,
            shape: vec![1, 4, 2, 4, 4],
            data: vec![0.0; 128],
        });
    }
    r
}

/// The run's final latents and its trajectory's latents at each kept boundary.
fn run(m: &WanModel, r: OmniRequest, latents: Option<&Tensor>) -> (Tensor, Vec<Tensor>) {
    let spec = Arc::new(pipeline::text_to_video(m, pipeline::default_guidance()).unwrap());
    let req = r.resolve(&m.limits(), || 0).unwrap();
    let mut init = Values::default();
    if let Some(l) = latents {
        init.insert(values::INITIAL_LATENTS, Value::Tensor(l.shallow_clone()));
    }
    let mut run = PipelineRun::new(spec, req, Device::Cpu, init, Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents returned") };
    let Some(Artifact::Trajectory(t)) = out.artifacts.get("trajectory") else { panic!("trajectory returned") };
    let n = l.data.len();
    let steps: Vec<Tensor> = t.latents.chunks(n).map(|c| Tensor::from_slice(c).view(l.shape.as_slice())).collect();
    (Tensor::from_slice(&l.data).view(l.shape.as_slice()), steps)
}

#[test]
fn a_schedule_split_in_two_runs_is_the_whole_run() {
    let m = model();
    let (whole, boundaries) = run(&m, request(None, None, false), None);
    // Stopping before step 3: the latents the whole run had there, noise and all.
    let (first, _) = run(&m, request(None, Some(3), false), None);
    assert!(first.equal(&boundaries[3]), "the first half ends where the whole run was at step 3");
    // Steps 3..6 from those latents as they are.
    let (second, _) = run(&m, request(Some(3), None, true), Some(&first));
    let e = (&second - &whole).abs().max().double_value(&[]);
    assert!(e == 0.0, "the second half finishes as the whole run does (max diff {e})");
    assert!(!second.equal(&first), "and it did run");
}

#[test]
fn partial_schedules_are_checked_against_the_request() {
    let m = model();
    for (r, field) in [
        (request(Some(3), None, false), "diffusion.start_step"),
        (request(Some(4), Some(4), true), "diffusion.start_step"),
        (request(None, Some(7), false), "diffusion.end_step"),
    ] {
        let e = r.resolve(&m.limits(), || 0).unwrap_err();
        assert_eq!(e.field, field, "{e:?}");
    }
}
