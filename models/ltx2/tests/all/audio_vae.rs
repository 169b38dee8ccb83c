//! The audio VAE's decoder against diffusers' `AutoencoderKLLTX2Audio.decode` (float32, CPU;
//! tests/fixtures/make_ltx2_fixtures.py): the published layout (pixel norms, causal on the time
//! axis: 4T − 3 mel frames) and a symmetric one with group norms and attention.

use fastvideo_ltx2::Ltx2AudioDecoder;
use tch::{Device, Kind};

use crate::common::{fixture, load, rel};

/// float32 on both sides: summation order only.
#[test]
fn both_audio_decoder_layouts_match_diffusers() {
    let f = load("audio_vae.safetensors");
    for layout in ["causal", "none"] {
        let d = Ltx2AudioDecoder::load(&fixture(&format!("audio_vae_{layout}")), Device::Cpu, Kind::Float).unwrap();
        let mel = d.decode(&f["latents"]).unwrap();
        let e = rel(&mel, &f[&format!("mel_{layout}")]);
        eprintln!("audio decoder {layout}: {e:.2e}");
        assert!(e < 1e-5, "audio decoder {layout}: {e:.2e}");
        assert!(d.latents_mean.equal(&f[&format!("mean_{layout}")]), "the latent statistics are the checkpoint's");
    }
}
