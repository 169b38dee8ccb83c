//! The latent upsampler against diffusers' `LTX2LatentUpsamplerModel` (float32, CPU;
//! tests/fixtures/make_ltx2_fixtures.py) in each of its layouts: the published rational ×2,
//! rational ×1.5 (shuffle by 3, blur and stride by 2), plain spatial ×2, temporal ×2 and 2-D
//! convolutions.

use fastvideo_ltx2::Ltx2LatentUpsampler;
use tch::{Device, Kind};

use crate::common::{fixture, load, rel};

/// float32 on both sides: summation order only.
#[test]
fn every_upsampler_layout_matches_diffusers() {
    let f = load("upsampler.safetensors");
    for kind in ["rational2", "rational15", "spatial", "temporal", "dims2"] {
        let m = Ltx2LatentUpsampler::load(&fixture(&format!("upsampler_{kind}")), Device::Cpu, Kind::Float).unwrap();
        let out = m.forward(&f["latents"]).unwrap();
        let e = rel(&out, &f[kind]);
        eprintln!("upsampler {kind}: {e:.2e}");
        assert!(e < 1e-5, "upsampler {kind}: {e:.2e}");
    }
}

#[test]
fn latents_of_another_width_are_refused() {
    let m = Ltx2LatentUpsampler::load(&fixture("upsampler_rational2"), Device::Cpu, Kind::Float).unwrap();
    let e = m.forward(&tch::Tensor::zeros([1, 4, 2, 2, 2], (Kind::Float, Device::Cpu))).unwrap_err().to_string();
    assert!(e.contains("latents [1, 4, 2, 2, 2], expected [B, 8, F, H, W]"), "{e}");
}
