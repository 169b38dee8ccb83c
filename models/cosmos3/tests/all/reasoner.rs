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
