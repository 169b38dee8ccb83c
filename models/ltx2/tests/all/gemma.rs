//! The Gemma 3 text encoder against transformers' `Gemma3ForConditionalGeneration` (float32,
//! CPU; tests/fixtures/make_ltx2_pipeline_fixtures.py): two sliding-window layers with a window
//! shorter than the prompt and a global one with linear rope scaling, prompts left-padded as the
//! pipeline pads them, every hidden state (the padded rows included) compared.

use std::path::PathBuf;

use fastvideo_ltx2::gemma::GemmaConfig;
use fastvideo_ltx2::GemmaEncoder;
use tch::{Device, Kind};

use crate::common::{load, rel};

fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-ltx2")
}

/// float32 on both sides: summation order only.
#[test]
fn gemma_hidden_states_match_transformers() {
    let enc = GemmaEncoder::load(&folder().join("text_encoder"), Device::Cpu, Kind::Float).unwrap();
    let f = load("gemma.safetensors");
    let states = enc.forward(&f["ids"], &f["mask"]).unwrap();
    assert_eq!(states.size(), f["states"].size());
    assert_eq!(i64::try_from(states.isnan().sum(Kind::Int64)).unwrap(), 0, "no NaN in the padded rows");
    let e = rel(&states, &f["states"]);
    eprintln!("gemma: {e:.2e}");
    assert!(e < 1e-5, "gemma hidden states: {e:.2e}");
}

/// A config as the Hub publishes Gemma 3 (transformers 4: `rope_scaling`, `rope_local_base_freq`,
/// no `layer_types`) reads as transformers 5 reads it.
#[test]
fn a_hub_style_config_gives_the_same_layers_and_rope() {
    let dir = tempfile_dir();
    let path = dir.join("config.json");
    let hub = r#"{"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {"hidden_size": 3840,
        "num_hidden_layers": 12, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "rope_local_base_freq": 10000.0, "rope_theta": 1000000.0, "sliding_window": 1024}}"#;
    std::fs::write(&path, hub).unwrap();
    let c = GemmaConfig::from_file(&path).unwrap();
    let kinds = c.layer_kinds();
    assert_eq!(kinds.iter().filter(|s| !**s).count(), 2, "every sixth layer is global");
    assert!(!kinds[5] && !kinds[11] && kinds[0]);
    assert_eq!(c.head_dim, 256, "transformers' default where the file is silent");
    std::fs::write(&path, r#"{"rope_parameters": {"full_attention": {"rope_type": "yarn"}}}"#).unwrap();
    let e = format!("{:#}", GemmaConfig::from_file(&path).unwrap_err());
    assert!(e.contains("rope type `yarn`") && e.contains("config.json"), "{e}");
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("fv-gemma-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
