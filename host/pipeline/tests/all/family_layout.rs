//! What a family decides in the denoise loop: its latents' layout (here a picture model's
//! `[1, C, H, W]`, no frames) and its schedule (here a shift of its own instead of the
//! request's static one). The toy's velocity is `latents * context`, so Euler with CFG
//! multiplies the latents by `Π (1 + dt_i (u + g (c - u)))` over the family's sigmas.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::denoise::seeded_noise;
use fastvideo_pipeline::sampler::{FlowMatchEuler, Sampler};
use fastvideo_pipeline::{
    CancelToken, ClassicCfg, Conditioning, DenoiseLoop, Denoiser, Node, NodeCtx, PipelineRun, PipelineSpec, Stage,
    Value, Values,
};
use fastvideo_request::{Artifact, ModelLimits, OmniRequest, ResolvedRequest, TaskType};
use tch::{Device, Tensor};

/// The shift this family's schedule takes whatever the request says.
const FAMILY_SHIFT: f64 = 1.7;
const SHAPE: [i64; 4] = [1, 2, 3, 3];

struct Picture;
impl Denoiser for Picture {
    fn forward(&self, latents: &Tensor, _t: &Tensor, cond: Conditioning) -> Result<Tensor> {
        // The condition channels ride along after the latents' own two.
        assert_eq!(latents.size(), [latents.size()[0], 3, 3, 3], "condition channels appended in the picture layout");
        Ok(latents.narrow(1, 0, 2) * cond.text)
    }
    fn latent_shape(&self, _req: &ResolvedRequest) -> Vec<i64> {
        SHAPE.to_vec()
    }
    fn sampler(&self, req: &ResolvedRequest) -> Box<dyn Sampler> {
        Box::new(FlowMatchEuler::new(req.steps as usize, FAMILY_SHIFT))
    }
}

/// The scalar contexts (cond 2, uncond 1) and a one-channel condition in the picture layout.
struct Inputs;
impl Stage for Inputs {
    fn run(&self, _ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        values.insert("cond", Value::Tensor(Tensor::from(2f32)));
        values.insert("uncond", Value::Tensor(Tensor::from(1f32)));
        values.insert("condition", Value::Tensor(Tensor::ones([1, 1, 3, 3], (tch::Kind::Float, Device::Cpu))));
        Ok(())
    }
}

fn spec() -> PipelineSpec {
    let denoise = DenoiseLoop {
        denoiser: Arc::new(Picture),
        guidance: Arc::new(ClassicCfg),
        blocks: None,
        steps: None,
        routing: None,
        contexts: BTreeMap::from([("cond".into(), "cond".into()), ("uncond".into(), "uncond".into())]),
        initial_latents: "init".into(),
        clean_latents: "clean_latents".into(),
        image_embeds: "image_embeds".into(),
        latent_condition: "condition".into(),
        condition: Arc::new(fastvideo_pipeline::ChannelCondition),
        output: "latents".into(),
        preview: None,
    };
    let nodes = vec![
        Node::stage("inputs", Arc::new(Inputs), &[], &["cond", "uncond", "condition"]),
        Node::looped("denoise", Arc::new(denoise), &["cond"], &["latents"]),
    ];
    PipelineSpec::new("picture", vec![TaskType::T2v], nodes, &[], "latents").unwrap()
}

#[test]
fn a_family_brings_its_latent_layout_and_its_schedule() {
    let mut req = OmniRequest::text_to_video("pic", "p").resolve(&ModelLimits::example(), || 7).unwrap();
    req.outputs.return_latents = true;
    let (steps, g, shift) = (req.steps as usize, req.guidance_scale as f64, req.shift as f64);
    assert_ne!(shift, FAMILY_SHIFT, "the request's shift differs from the family's");
    let mut run =
        PipelineRun::new(Arc::new(spec()), req.clone(), Device::Cpu, Values::default(), CancelToken::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let out = run.finish(&mut |_| {}).unwrap();
    let Some(Artifact::Latents(l)) = out.artifacts.get("latents") else { panic!("latents") };
    assert_eq!(l.shape, SHAPE, "the loop keeps the family's layout");
    let factor = |shift: f64| -> f64 {
        let sig = FlowMatchEuler::new(steps, shift).sigmas().to_vec();
        (0..steps).map(|i| 1.0 + (sig[i + 1] - sig[i]) as f64 * (1.0 + g * (2.0 - 1.0))).product()
    };
    let x0 = seeded_noise(&SHAPE, req.seed, Device::Cpu);
    let want = Vec::<f32>::try_from(x0.flatten(0, -1) * factor(FAMILY_SHIFT)).unwrap();
    let with_request_shift = Vec::<f32>::try_from(x0.flatten(0, -1) * factor(shift)).unwrap();
    // Tolerance: float32 steps against a float64 product, as the driver's closed-form test.
    let close = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| (a - b).abs() <= 1e-5 * b.abs().max(1.0));
    assert!(close(&l.data, &want), "{:?} vs {want:?}", l.data);
    assert!(!close(&l.data, &with_request_shift), "the request's static shift was used");
}
