//! Token-budget packing: requests of different sizes, guidance and reference counts stepped
//! as one packed forward give what each gives alone.

use std::sync::Arc;

use fastvideo_flux2::values::LATENTS;
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::{ImageRole, InputPart, OmniRequest, ResolvedRequest, TaskType};
use tch::{Device, Tensor};

use crate::common::{fixture, load, rel};
use crate::pipeline::{model, request, run};

fn requests(m: &fastvideo_flux2::model::Flux2Model) -> Vec<ResolvedRequest> {
    let f = load("flux2/t2i.safetensors");
    // 32x48 with guidance (two branches).
    let a = request("a", &f["latents"]);
    // 16x24 without guidance, seeded noise.
    let mut b = OmniRequest::text_to_video("b", "a blue whale");
    b.task = TaskType::T2i;
    (b.diffusion.height, b.diffusion.width) = (Some(16), Some(24));
    b.diffusion.num_inference_steps = Some(3);
    b.diffusion.guidance_scale = Some(1.0);
    b.sampling.seed = Some(9);
    // 32x48 edit with one reference (its tokens ride in the sample).
    let mut c = request("c", &f["latents"]);
    c.task = TaskType::I2i;
    let path = fixture("flux2/ref1.png").display().to_string();
    c.inputs.push(InputPart::Image { path: Some(path), b64: None, role: ImageRole::Reference });
    [a, b, c].into_iter().map(|r| r.resolve(&m.limits(), || 0).unwrap()).collect()
}

/// float32: the packed forward runs the same arithmetic per token, but its matrix products
/// have more rows, which may change the summation order (1e-5 relative leaves room for it).
#[test]
fn packed_steps_of_different_sizes_equal_solo_runs() {
    let m = model();
    let solo: Vec<Tensor> = requests(&m).into_iter().map(|r| run(&m, r).1).collect();
    let spec = Arc::new(fastvideo_flux2::pipeline::spec(&m).unwrap());
    let mut runs: Vec<PipelineRun> = requests(&m)
        .into_iter()
        .map(|r| PipelineRun::new(spec.clone(), r, Device::Cpu, Values::default(), Default::default()))
        .collect();
    for r in &mut runs {
        while r.batch_key().is_none() {
            r.advance(&mut |_| {}).unwrap();
        }
    }
    let keys: Vec<_> = runs.iter().map(|r| r.batch_key()).collect();
    assert!(keys.iter().all(|k| *k == keys[0]), "one key packs every size: {keys:?}");
    let tokens: Vec<u64> = runs.iter().map(|r| r.batch_tokens().unwrap()).collect();
    // (6·4 image + 512 text) × 2 branches; 3·2 + 512; (24 + 8·8 reference + 512) × 2.
    assert_eq!(tokens, [1072, 518, 1200]);
    let mut steps = 0;
    while runs.iter().any(|r| r.batch_key().is_some()) {
        let mut refs: Vec<&mut PipelineRun> = runs.iter_mut().collect();
        for result in PipelineRun::step_batch(&mut refs, &mut |_, _| {}) {
            result.unwrap();
        }
        steps += 1;
    }
    assert_eq!(steps, 3, "every step ran packed");
    for (i, (r, want)) in runs.iter_mut().zip(&solo).enumerate() {
        r.run_to_end(&mut |_| {}).unwrap();
        let e = rel(r.values().tensor(LATENTS).unwrap(), want);
        assert!(e < 1e-5, "request {i}: packed differs from solo by {e:.2e}");
    }
}
