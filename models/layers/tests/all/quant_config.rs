//! ModelOpt's `quantization_config`: the ignore list's patterns, and the methods refused.

use std::path::Path;

use fastvideo_layers::quant_config::QuantizationConfig;

fn config(json: serde_json::Value) -> QuantizationConfig {
    serde_json::from_value(json).unwrap()
}

#[test]
fn the_ignore_list_matches_whole_names_with_wildcards() {
    let c = config(serde_json::json!({
        "quant_method": "modelopt", "quant_algo": "FP8",
        "ignore": ["proj_out", "condition_embedder*", "*.attn2.*", "blocks.*.ffn.net.2"]
    }));
    c.check(Path::new("config.json")).unwrap();
    for (name, ignored) in [
        ("proj_out", true),
        ("proj_out2", false),
        ("condition_embedder.time_proj", true),
        ("blocks.3.attn2.to_k", true),
        ("blocks.3.attn1.to_k", false),
        ("blocks.12.ffn.net.2", true),
        ("blocks.12.ffn.net.0.proj", false),
    ] {
        assert_eq!(c.ignores(name), ignored, "{name}");
    }
}

#[test]
fn other_methods_and_algorithms_are_refused_by_key() {
    let nvfp4 = config(serde_json::json!({"quant_method": "modelopt", "quant_algo": "NVFP4"}));
    let e = nvfp4.check(Path::new("t/config.json")).unwrap_err().to_string();
    assert!(e.contains("quantization_config.quant_algo") && e.contains("NVFP4"), "{e}");
    let gptq = config(serde_json::json!({"quant_method": "gptq"}));
    assert!(gptq.check(Path::new("c.json")).unwrap_err().to_string().contains("quantization_config.quant_method"));
}
