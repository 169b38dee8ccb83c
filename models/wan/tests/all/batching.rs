//! Steps of several requests batched into one transformer forward give the same latents as the
//! requests run alone. Tolerance: 1e-4 relative (float32 GEMMs over a larger batch may round in
//! a different order; the results are otherwise the same arithmetic).

use std::path::Path;
use std::sync::Arc;

use fastvideo_pipeline::{Advance, PipelineRun, PipelineSpec, Values};
use fastvideo_request::{Artifact, OmniRequest, ResolvedRequest};
use fastvideo_wan::{pipeline, WanModel};
use tch::{Device, Tensor};

fn model() -> WanModel {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-wan");
    WanModel::load(&dir, Device::Cpu).expect("tiny model loads")
}

fn request(m: &WanModel, id: &str, prompt: &str, seed: u64, steps: u32) -> ResolvedRequest {
    let mut r = OmniRequest::text_to_video(id, prompt);
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(32);
    r.diffusion.num_frames = Some(5);
    r.diffusion.num_inference_steps = Some(steps);
    r.diffusion.guidance_scale = Some(4.0);
    r.outputs.return_latents = true;
    r.sampling.seed = Some(seed);
    r.resolve(&m.limits(), || 0).unwrap()
}

fn latents(run: PipelineRun) -> Tensor {
    let out = run.finish(&mut |_| {}).unwrap();
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents returned") };
    Tensor::from_slice(&l.data).view(l.shape.as_slice())
}

fn alone(spec: &Arc<PipelineSpec>, req: ResolvedRequest) -> Tensor {
    let mut run = PipelineRun::new(spec.clone(), req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    latents(run)
}

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[])
}

#[test]
fn batched_steps_match_unbatched_runs() {
    let m = model();
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    // Different prompts, seeds and step counts: the batch carries one timestep per row.
    let reqs = [
        request(&m, "a", "a red circle moving left on a white background", 1, 4),
        request(&m, "b", "a blue square moving up on a black background", 2, 6),
        request(&m, "c", "a green star growing on a gray background", 3, 4),
    ];
    let reference: Vec<Tensor> = reqs.iter().map(|r| alone(&spec, r.clone())).collect();

    let mut runs: Vec<PipelineRun> = reqs
        .iter()
        .map(|r| PipelineRun::new(spec.clone(), r.clone(), Device::Cpu, Values::default(), Default::default()))
        .collect();
    let mut batched_steps = 0;
    let mut progress = [0u32; 3];
    loop {
        // Bring every run to a step boundary (encode, loop init) one unit at a time.
        let keys: Vec<_> = runs.iter().map(|r| r.batch_key()).collect();
        let ready: Vec<usize> = (0..runs.len()).filter(|&i| keys[i].is_some() && keys[i] == keys[0]).collect();
        if ready.len() >= 2 {
            let mut group: Vec<&mut PipelineRun> =
                runs.iter_mut().enumerate().filter(|(i, _)| ready.contains(i)).map(|(_, r)| r).collect();
            let results = PipelineRun::step_batch(&mut group, &mut |i, e| {
                if matches!(e, fastvideo_request::OmniEvent::Progress { .. }) {
                    progress[ready[i]] += 1;
                }
            });
            assert!(results.iter().all(|r| r.is_ok()));
            batched_steps += 1;
            continue;
        }
        let mut worked = false;
        for r in runs.iter_mut() {
            if r.batch_key().is_none() && r.advance(&mut |_| {}).unwrap() == Advance::Worked {
                worked = true;
            }
        }
        if !worked {
            // Only one run is left in its loop: step it alone.
            let mut any = false;
            for r in runs.iter_mut() {
                if r.batch_key().is_some() {
                    r.advance(&mut |_| {}).unwrap();
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
    }
    assert!(batched_steps >= 4, "the three runs were batched ({batched_steps} batched calls)");
    assert_eq!(progress[0], 4, "every batched step streams its own progress event");
    for (run, want) in runs.into_iter().zip(&reference) {
        let e = rel_err(&latents(run), want);
        eprintln!("batched vs alone: relative error {e:.2e}");
        assert!(e < 1e-4, "batched latents differ from the unbatched run: relative error {e}");
        // tolerance 1e-4
    }
}

#[test]
fn runs_of_other_shapes_or_guidance_do_not_share_a_key() {
    let m = model();
    let spec = Arc::new(pipeline::text_to_video(&m, pipeline::default_guidance()).unwrap());
    let a = request(&m, "a", "a red circle", 1, 4);
    let mut b = request(&m, "b", "a red circle", 1, 4);
    b.height = 48;
    let mut no_cfg = request(&m, "c", "a red circle", 1, 4);
    no_cfg.guidance_scale = 1.0;
    let key = |r: ResolvedRequest| {
        let mut run = PipelineRun::new(spec.clone(), r, Device::Cpu, Values::default(), Default::default());
        while run.batch_key().is_none() {
            run.advance(&mut |_| {}).unwrap();
        }
        run.batch_key()
    };
    let ka = key(a.clone());
    assert_eq!(ka, key(a));
    assert_ne!(ka, key(b), "another latent shape");
    assert_ne!(ka, key(no_cfg), "another branch set");
}
