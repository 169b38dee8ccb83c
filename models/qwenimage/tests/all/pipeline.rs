//! End-to-end parity with diffusers' `QwenImagePipeline` on the tiny folder from the same packed
//! `latents` (fixtures: make_qwenimage_fixtures.py): true CFG with a negative prompt (the
//! combined prediction rescaled to the conditional norm), and no guidance without one.

use std::sync::Arc;

use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_qwenimage::model::QwenImageModel;
use fastvideo_qwenimage::values::LATENTS;
use fastvideo_request::{InputPart, OmniOutput, OmniRequest, ResolvedRequest, TaskType};
use tch::{Device, Kind, Tensor};

use crate::common::{folder, load, rel};

pub fn model() -> QwenImageModel {
    QwenImageModel::load(&folder(), None, Device::Cpu, (Kind::Float, Kind::Float, Kind::Float)).unwrap()
}

/// The fixtures' call: 32x48, 3 steps, `true_cfg_scale` 4, the given packed `latents`.
pub fn request(id: &str, latents: &Tensor, negative: Option<&str>) -> OmniRequest {
    let mut r = OmniRequest::text_to_video(id, "a red fox jumps over the lazy dog");
    r.task = TaskType::T2i;
    (r.diffusion.height, r.diffusion.width) = (Some(32), Some(48));
    r.diffusion.num_inference_steps = Some(3);
    r.diffusion.guidance_scale = Some(4.0);
    r.diffusion.negative_prompt = negative.map(str::to_string);
    let l = latents.contiguous();
    r.inputs.push(InputPart::Latent {
        name: None,
        shape: l.size(),
        data: Vec::<f32>::try_from(l.reshape([-1])).unwrap(),
    });
    r
}

pub fn run(model: &QwenImageModel, req: ResolvedRequest) -> (OmniOutput, Tensor) {
    let spec = Arc::new(fastvideo_qwenimage::pipeline::spec(model).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let latents = run.values().tensor(LATENTS).unwrap().copy();
    (run.finish(&mut |_| {}).unwrap(), latents)
}

pub fn picture_error(out: &OmniOutput, want: &Tensor) -> f64 {
    let v = out.video().expect("a picture");
    let ours = Tensor::from_slice(&v.rgb).view([v.height as i64, v.width as i64, 3]).to_kind(Kind::Float) / 255.0;
    (ours.to_kind(Kind::Double) - want.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// float32 both sides: final latents within 1e-4 relative; the picture within half an 8-bit
/// step plus 1e-3.
#[test]
fn text_to_image_matches_diffusers_with_and_without_a_negative_prompt() {
    let m = model();
    for (case, negative) in
        [("qwenimage/t2i.safetensors", Some("blurry, low quality")), ("qwenimage/t2i_nocfg.safetensors", None)]
    {
        let f = load(case);
        let req = request("t2i", &f["latents"], negative).resolve(&m.limits(), || 0).unwrap();
        assert_eq!(m.denoise().does_cfg(&req), negative.is_some(), "guidance runs only with a negative prompt");
        let (out, latents) = run(&m, req);
        let e = rel(&latents, &f["final_latents"]);
        eprintln!("{case}: final latents {e:.2e}");
        assert!(e < 1e-4, "{case}: final latents {e:.2e}");
        let e = picture_error(&out, &f["image"]);
        eprintln!("{case}: picture {e:.2e}");
        assert!(e < 0.5 / 255.0 + 1e-3, "{case}: picture {e:.2e}");
    }
}
