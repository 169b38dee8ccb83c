//! The reasoner on the denoiser's weights against transformers'
//! `Cosmos3OmniForConditionalGeneration` (fixture: make_cosmos3_fixtures.py `reasoner_case`):
//! the prompt's logits and a greedy continuation, and that it holds no second copy.

use fastvideo_cosmos3::reasoner::reasoner;
use fastvideo_cosmos3::Cosmos3Model;
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, ints, load, max_abs};

/// float32 on both sides, the same ops up to fused projections: ~1e-5 measured.
const LOGITS_TOL: f64 = 1e-4;

#[test]
fn greedy_text_matches_transformers_on_the_same_weights() {
    let m = Cosmos3Model::load(&fixture("tiny-cosmos3"), Device::Cpu, Kind::Float, Kind::Float).unwrap();
    let f = load("cosmos3/reasoner.safetensors");
    let lm = reasoner(&m.transformer, &m.prompts).unwrap().expect("a Nano layout has a reasoner");
    let prompt = ints(&f["prompt"]);
    let mut cache = lm.model.cache();
    let logits = lm.model.forward(&Tensor::from_slice(&prompt).unsqueeze(0), &mut cache).unwrap().squeeze_dim(0);
    let d = max_abs(&logits, &f["logits"]);
    eprintln!("reasoner: prompt logits max abs {d:.2e}");
    assert!(d < LOGITS_TOL, "logits {d:.2e}");
    let greedy = lm.model.greedy(&prompt, 24).unwrap();
    assert_eq!(greedy, ints(&f["greedy"]), "greedy continuation");
    // One copy: the reasoner's embedding is the denoiser's tensor, not a copy of it.
    let shared = m.transformer.text_weights().unwrap();
    assert_eq!(shared.embed_tokens.data_ptr(), lm.model.embed_tokens_ptr(), "the embedding is shared");
}

/// `prompt_extend`: the reasoner's rewrite runs as loop nodes before the denoise loop, on the
/// same weights, and the denoiser reads the rewritten prompt (its ids are the templates' ids of
/// the rewrite, not of the request's prompt).
#[test]
fn prompt_extend_rewrites_with_the_reasoner_then_denoises_the_rewrite() {
    use fastvideo_cosmos3::family::COSMOS3;
    use fastvideo_cosmos3::prompt::{PromptBuilder, Shape};
    use fastvideo_cosmos3::values::PROMPT_IDS;
    use fastvideo_family::{Family, LoadContext};
    use fastvideo_pipeline::{LoopPolicies, PipelineRun, Values};
    use fastvideo_torch::{DtypeChoice, Precision};

    let numerics = Precision::Exact.numerics(Device::Cpu, DtypeChoice::Auto, DtypeChoice::Auto).unwrap();
    let loaded = COSMOS3.load(&fixture("tiny-cosmos3"), &LoadContext::new(Device::Cpu, numerics)).unwrap();
    let rewriter = loaded.rewriter().expect("a Nano layout rewrites with its reasoner");
    let mut policies = LoopPolicies::new(std::sync::Arc::new(fastvideo_pipeline::ClassicCfg));
    policies.text_stages = rewriter.nodes();
    let spec = loaded.pipeline(policies).unwrap();
    let mut r = fastvideo_request::OmniRequest::text_to_video("ext", "a robot arm");
    (r.diffusion.height, r.diffusion.width, r.diffusion.num_frames) = (Some(48), Some(64), Some(5));
    r.diffusion.num_inference_steps = Some(1);
    r.prompt_extend = true;
    r.node_params.insert(fastvideo_pipeline::EXTEND_NODE.into(), serde_json::json!({"max_tokens": 6}));
    let req = r.resolve(&loaded.limits(), || 0).unwrap();
    let mut run = PipelineRun::new(spec, req.clone(), Device::Cpu, Values::default(), Default::default());
    run.run_to_end(&mut |_| {}).unwrap();
    let ids = ints(run.values().tensor(PROMPT_IDS).unwrap());
    let out = run.finish(&mut |_| {}).unwrap();
    let extended = out.extended_prompt.expect("the rewrite is reported");
    assert!(out.metrics.node_seconds.iter().any(|(n, _)| n == fastvideo_pipeline::EXTEND_NODE), "the decode loop ran");
    let m = loaded.as_any().downcast_ref::<fastvideo_cosmos3::family::LoadedCosmos3>().unwrap();
    let shape = Shape { frames: 5, height: 48, width: 64, fps: req.fps as f64 };
    let want = m.model.prompts.ids(&PromptBuilder::templated(&extended, false, shape), false).unwrap();
    assert_eq!(ids, want, "the denoiser's prompt is the rewrite");
}
