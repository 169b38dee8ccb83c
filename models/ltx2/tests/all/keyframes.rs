//! Keyframe conditioning against diffusers' `LTX2ConditionPipeline.prepare_latents`
//! (tests/fixtures/make_ltx2_condition_fixture.py): three pictures — 56x40 at latent frame 0
//! with strength 0.8 (written over the first frame's tokens), 20x24 at latent frame 3 (pixel
//! frame 9) with 0.5 and 32x32 at latent frame 4 (pixel frame 13) with 1 (appended) — each
//! scaled to cover 32x32, centre-cropped, encoded, normalised; the pipeline's one draw mixed in
//! at noise scale 0.9 by `1 − mask`; and the transformer's positions of every token.

use fastvideo_ltx2::keyframes::{keyed_start, keyframe_latents, latent_index, Placed};
use fastvideo_request::{ImageRole, InputImage};
use tch::{Device, Kind, Tensor};

use crate::common::{fixture, load, rel};

fn picture(name: &str) -> InputImage {
    let png = image::open(fixture(name)).unwrap().to_rgb8();
    InputImage { role: ImageRole::Keyframe, width: png.width(), height: png.height(), rgb: png.into_raw() }
}

/// float32 on both sides: the encoder's summation order only (1e-5 relative); the mask exactly;
/// the positions to float32 rounding (1e-6 relative).
#[test]
fn keyframes_are_placed_noised_and_positioned_as_the_condition_pipeline_does() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-ltx2");
    let model = fastvideo_ltx2::Ltx2Model::load(&root, Device::Cpu, (Kind::Float, Kind::Float, Kind::Float)).unwrap();
    let stats = fastvideo_ltx2::pipeline::statistics(&model);
    let g = model.geometry;
    let conds: Vec<Placed> = [("first_frame.png", 0, 0.8), ("keyframe_a.png", 9, 0.5), ("keyframe_b.png", 13, 1.0)]
        .iter()
        .map(|&(name, frame, strength)| {
            let z = keyframe_latents(&model.encoder, &stats, &picture(name), (32, 32), Device::Cpu).unwrap();
            Placed { latents: z.select(2, 0), index: latent_index(frame, g.temporal), strength }
        })
        .collect();
    assert_eq!(conds.iter().map(|c| c.index).collect::<Vec<_>>(), [0, 3, 4]);
    let f = load("condition_prepare.safetensors");
    let start = Tensor::zeros([1, 80, 8], (Kind::Float, Device::Cpu));
    let cfg = &model.transformer.cfg;
    let (video, k) = keyed_start(
        &start,
        &conds,
        Some((&f["noise"], 0.9)),
        [5, 4, 4],
        (g.temporal, g.spatial),
        (cfg.vae_scale_factors, cfg.causal_offset),
        24.0,
    )
    .unwrap();
    assert_eq!(k.tokens, 80);
    assert!(k.mask.equal(&f["mask"]), "mask {:?}", k.mask);
    for (name, got, want) in [("latents", &video, &f["latents"]), ("clean", &k.clean, &f["clean"])] {
        let e = rel(got, want);
        eprintln!("keyframes {name}: {e:.2e}");
        assert!(e < 1e-5, "{name}: {e:.2e}");
    }
    let e = rel(k.positions.as_ref().unwrap(), &f["positions"]);
    eprintln!("keyframes positions: {e:.2e}");
    assert!(e < 1e-6, "positions: {e:.2e}");
}
