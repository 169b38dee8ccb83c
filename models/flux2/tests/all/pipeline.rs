//! End-to-end parity with diffusers' `Flux2KleinPipeline` on the tiny folder from the same
//! `latents` (fixtures: make_flux2_fixtures.py): text to image with classifier-free guidance,
//! and an edit with two reference pictures of other sizes (one cropped).

use std::sync::Arc;

use fastvideo_flux2::model::Flux2Model;
use fastvideo_flux2::vae::unpatchify;
use fastvideo_flux2::values::LATENTS;
use fastvideo_pipeline::{PipelineRun, Values};
use fastvideo_request::{ImageRole, InputPart, OmniOutput, OmniRequest, ResolvedRequest, TaskType};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, folder, load, rel};

pub const PROMPT: &str = "a red fox jumps over the lazy dog";

pub fn model() -> Flux2Model {
    Flux2Model::load(&folder(), Device::Cpu, Kind::Float, Kind::Float, Kind::Float).unwrap()
}

/// The fixtures' call: 32x48, 3 steps, guidance 4, the given `latents`.
pub fn request(id: &str, latents: &Tensor) -> OmniRequest {
    let mut r = OmniRequest::text_to_video(id, PROMPT);
    r.task = TaskType::T2i;
    r.diffusion.height = Some(32);
    r.diffusion.width = Some(48);
    r.diffusion.num_inference_steps = Some(3);
    r.diffusion.guidance_scale = Some(4.0);
    let l = latents.contiguous();
    r.inputs.push(InputPart::Latent {
        name: None,
        shape: l.size(),
        data: Vec::<f32>::try_from(l.reshape([-1])).unwrap(),
    });
    r
}

/// The run's output and its final latents (the loop's layout).
pub fn run(model: &Flux2Model, req: ResolvedRequest) -> (OmniOutput, Tensor) {
    let spec = Arc::new(fastvideo_flux2::pipeline::spec(model).unwrap());
    let mut run = PipelineRun::new(spec, req, Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let latents = run.values().tensor(LATENTS).unwrap().copy();
    (run.finish(&mut |_| {}).unwrap(), latents)
}

/// The picture `[H, W, 3]` in [0, 1].
pub fn picture(out: &OmniOutput) -> Tensor {
    let v = out.video().expect("a picture");
    assert_eq!(v.num_frames, 1);
    Tensor::from_slice(&v.rgb).view([v.height as i64, v.width as i64, 3]).to_kind(Kind::Float) / 255.0
}

/// Largest difference of our 8-bit picture from the reference's float one.
fn picture_error(out: &OmniOutput, want: &Tensor) -> f64 {
    (picture(out).to_kind(Kind::Double) - want.to_kind(Kind::Double)).abs().max().double_value(&[])
}

/// float32 both sides: the final latents within 1e-4 relative (3 steps, two guidance branches;
/// the transformer alone agrees to ~2e-6); the picture within half an 8-bit step (rounding)
/// plus that.
#[test]
fn text_to_image_matches_diffusers() {
    let m = model();
    let f = load("flux2/t2i.safetensors");
    let req = request("t2i", &f["latents"]).resolve(&m.limits(), || 0).unwrap();
    let (out, latents) = run(&m, req);
    let vae_latents = unpatchify(&m.vae.denormalize(&latents));
    let e = rel(&vae_latents, &f["final_latents"]);
    eprintln!("final latents: {e:.2e}");
    assert!(e < 1e-4, "final latents: {e:.2e}");
    let e = picture_error(&out, &f["image"]);
    eprintln!("picture: {e:.2e}");
    assert!(e < 0.5 / 255.0 + 1e-3, "picture: {e:.2e}");
}

#[test]
fn edit_with_two_references_matches_diffusers() {
    let m = model();
    let f = load("flux2/edit.safetensors");
    let mut r = request("edit", &f["latents"]);
    r.task = TaskType::I2i;
    for name in ["ref0.png", "ref1.png"] {
        let path = fixture(&format!("flux2/{name}")).display().to_string();
        r.inputs.push(InputPart::Image { path: Some(path), b64: None, role: ImageRole::Reference });
    }
    let req = r.resolve(&m.limits(), || 0).unwrap();
    let (out, _) = run(&m, req);
    let e = picture_error(&out, &f["image"]);
    eprintln!("picture: {e:.2e}");
    assert!(e < 0.5 / 255.0 + 1e-3, "picture: {e:.2e}");
}
