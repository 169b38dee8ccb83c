//! Parity of the transformer with diffusers' `Cosmos3OmniTransformer` on one packed
//! `[text | vision | sound | action]` forward (fixtures: make_cosmos3_fixtures.py), and of the
//! packing with the pipeline's position builders.

use fastvideo_cosmos3::packing::{pack, Layout};
use fastvideo_cosmos3::{Cosmos3Config, Cosmos3Transformer, GenInput};
use fastvideo_pipeline::packed::PackedSeq;
use tch::{Device, Kind};

use crate::common::{fixture, ints, load, max_abs};

/// float32 on the CPU, the same ops in the same order but for fused projections and the split
/// of the prompt's pass from the step's: measured differences are ~1e-6; 2e-4 still catches a
/// swapped pathway, a chunked mRoPE or a timestep on a clean frame (each moves outputs by >1e-2).
const TOL: f64 = 2e-4;

fn layout() -> Layout {
    Layout {
        vision: [2, 3, 4],
        vision_clean: vec![0],
        temporal_compression: 4,
        fps: 16.0,
        sound: Some(5),
        action: Some((3, vec![0])),
    }
}

fn check(transformer_dir: &str, case: &str) {
    let f = load(case);
    let dir = fixture(transformer_dir);
    let cfg = Cosmos3Config::load(&dir.join("config.json")).unwrap();
    let model = Cosmos3Transformer::load(&dir, Device::Cpu, Kind::Float).unwrap();
    let ids = ints(&f["input_ids"]);
    let seq: PackedSeq = pack(&cfg, ids.len() as i64, &layout()).unwrap();
    assert_eq!(max_abs(&seq.positions(Device::Cpu), &f["position_ids"]), 0.0, "positions differ from the pipeline's");
    let prefix = model.prefix(&ids, &seq.positions(Device::Cpu).narrow(1, 0, seq.prefix_len())).unwrap();
    let vision = f["vision"].squeeze_dim(0);
    let input = GenInput {
        vision: &vision,
        sound: Some(&f["sound"]),
        action: Some(&f["action"]),
        domain: Some(4),
        timestep: f["timestep"].double_value(&[0]),
    };
    let out = model.forward(&[&seq], &[&prefix], &input).unwrap();
    let dv = max_abs(&out.vision, &f["pred_vision"]);
    let ds = max_abs(&out.sound.unwrap().squeeze_dim(0), &f["pred_sound"]);
    let da = max_abs(&out.action.unwrap().squeeze_dim(0), &f["pred_action"]);
    eprintln!("{case}: max abs vision {dv:.2e}, sound {ds:.2e}, action {da:.2e}");
    assert!(dv < TOL && ds < TOL && da < TOL, "{case}: vision {dv:.2e}, sound {ds:.2e}, action {da:.2e}");
}

#[test]
fn nano_forward_matches_diffusers() {
    check("tiny-cosmos3/transformer", "cosmos3/forward_nano.safetensors");
}

#[test]
fn edge_forward_matches_diffusers() {
    check("cosmos3/edge_transformer", "cosmos3/forward_edge.safetensors");
}
