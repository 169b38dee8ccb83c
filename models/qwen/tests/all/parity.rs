//! Parity with transformers 5.24 on the tiny random folders of
//! `tests/fixtures/make_qwen_fixtures.py`: Qwen3 (tied embeddings, q/k norm, explicit head dim,
//! rope theta 1e6) and Qwen2.5 (untied, q/k/v biases). Logits for a two-row prompt, the same
//! logits position by position through the key/value cache, and 64 greedy tokens.
//!
//! Tolerance: float32 on both sides; the only differences are reduction orders (matmuls, SDPA,
//! the norms' means), ~1e-6 relative on logits of magnitude ~10. Bound: 1e-4 of the logits'
//! largest magnitude. Greedy tokens must match exactly (the fixture's seed keeps every step's top
//! two logits more than 1e-3 apart).

use std::path::{Path, PathBuf};

use fastvideo_qwen::QwenForCausalLM;
use tch::{Device, Kind, Tensor};

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(format!("tiny-{family}"))
}

fn expected(dir: &Path) -> (Tensor, Tensor, Vec<i64>) {
    let t = Tensor::read_safetensors(dir.join("expected.safetensors")).expect("expected.safetensors");
    let get = |n: &str| t.iter().find(|(k, _)| k == n).map(|(_, v)| v.shallow_clone()).expect(n);
    let greedy = Vec::<i64>::try_from(get("greedy")).unwrap();
    (get("prompt"), get("logits"), greedy)
}

fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    let d = (a - b).abs().max().double_value(&[]);
    d / b.abs().max().double_value(&[])
}

fn check(family: &str) {
    let dir = fixture(family);
    let model = QwenForCausalLM::load(&dir, Device::Cpu, Kind::Float).expect("the fixture loads");
    let (prompt, want, greedy) = expected(&dir);

    let logits = model.forward(&prompt, &mut model.cache()).unwrap();
    let e = max_rel(&logits, &want);
    eprintln!("{family}: prompt logits max rel {e:.2e}");
    assert!(e < 1e-4, "{family}: logits differ from transformers by {e}");

    // Position by position through the cache: prefill 4, then a chunk of 3 (the masked path),
    // then one token at a time.
    let mut cache = model.cache();
    let mut parts = vec![model.forward(&prompt.narrow(1, 0, 4), &mut cache).unwrap()];
    parts.push(model.forward(&prompt.narrow(1, 4, 3), &mut cache).unwrap());
    for i in 7..prompt.size()[1] {
        parts.push(model.forward(&prompt.narrow(1, i, 1), &mut cache).unwrap());
    }
    let e = max_rel(&Tensor::cat(&parts, 1), &want);
    assert!(e < 1e-4, "{family}: cached logits differ by {e}");

    let row: Vec<i64> = Vec::try_from(prompt.get(0)).unwrap();
    let got = model.greedy(&row, greedy.len()).unwrap();
    assert_eq!(got, greedy, "{family}: greedy tokens differ from transformers' generate");
}

#[test]
fn qwen3_matches_transformers() {
    check("qwen3");
}

#[test]
fn qwen2_matches_transformers() {
    check("qwen2");
}
