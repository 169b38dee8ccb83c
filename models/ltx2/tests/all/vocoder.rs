//! The vocoders against diffusers (float32, CPU; tests/fixtures/make_ltx2_fixtures.py):
//! `LTX2Vocoder` (LeakyReLU, tanh) and `LTX2VocoderWithBWE` (anti-aliased SnakeBeta, the band
//! extension's STFT, mel basis and Hann resampler) on the same stereo mel spectrogram.

use fastvideo_ltx2::Ltx2Vocoder;
use tch::{Device, Kind};

use crate::common::{fixture, load, rel};

/// float32 on both sides: summation order only (the anti-aliasing filters are computed here
/// and read from the checkpoint alike).
#[test]
fn both_vocoders_match_diffusers() {
    let f = load("vocoder.safetensors");
    for (layout, rate) in [("20", 24000), ("23", 48000)] {
        let v = Ltx2Vocoder::load(&fixture(&format!("vocoder_{layout}")), Device::Cpu, Kind::Float).unwrap();
        assert_eq!(v.sample_rate, rate);
        let wave = v.forward(&f["mel"]);
        let e = rel(&wave, &f[&format!("wave_{layout}")]);
        eprintln!("vocoder {layout}: {e:.2e}");
        assert!(e < 1e-5, "vocoder {layout}: {e:.2e}");
    }
}
