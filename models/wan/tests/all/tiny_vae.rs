//! The tiny video decoder against its reference definition (models/training/tiny_vae.py) on tiny
//! random configs, float32 on CPU (fixtures from tests/fixtures/make_tiny_vae_fixtures.py), and
//! streaming: chunk by chunk equals the whole sequence.

use std::path::{Path, PathBuf};

use fastvideo_wan::tiny_vae::{TinyDecodeStream, TinyVideoDecoder};
use tch::{Device, Kind, Tensor};

/// float32 convolutions in another order: the max error relative to the output's range.
const TOLERANCE: f64 = 1e-5;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn fx(name: &str) -> &'static Tensor {
    crate::common::fixture("tiny_vae.safetensors", name)
}

fn load(case: &str) -> TinyVideoDecoder {
    TinyVideoDecoder::load(&fixtures().join("tiny-vae").join(case), Device::Cpu, Kind::Float).unwrap()
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[]) / b.abs().max().double_value(&[]).max(1e-12)
}

#[test]
fn the_tiny_decoder_matches_its_reference() {
    for case in ["wan", "patched"] {
        let d = load(case);
        let video = d.decode(fx(&format!("{case}.latents"))).unwrap();
        let want = fx(&format!("{case}.video"));
        let e = rel(&video, want);
        assert!(e < TOLERANCE, "{case}: relative error {e}");
    }
}

#[test]
fn decoding_chunk_by_chunk_equals_the_whole_sequence() {
    for case in ["wan", "patched"] {
        let d = load(case);
        let z = fx(&format!("{case}.latents"));
        let whole = d.decode(z).unwrap();
        for split in [1, 2] {
            let mut stream = TinyDecodeStream::default();
            let first = d.decode_next(&mut stream, &z.narrow(2, 0, split)).unwrap();
            let rest = d.decode_next(&mut stream, &z.narrow(2, split, 3 - split)).unwrap();
            let f = d.cfg.time_factor();
            assert_eq!(first.size()[2], f * (split - 1) + 1, "{case}: the first chunk drops the warm-up frames");
            let chunked = Tensor::cat(&[first, rest], 2);
            assert!(rel(&chunked, &whole) < 1e-6, "{case}: chunks of {split} differ from the whole");
        }
        // Without the carried memory the second chunk comes out different: the stream matters.
        let fresh = d.decode(&z.narrow(2, 1, 2)).unwrap();
        let carried = {
            let mut stream = TinyDecodeStream::default();
            let _ = d.decode_next(&mut stream, &z.narrow(2, 0, 1)).unwrap();
            d.decode_next(&mut stream, &z.narrow(2, 1, 2)).unwrap()
        };
        let n = fresh.size()[2];
        assert!(rel(&carried.narrow(2, carried.size()[2] - n, n), &fresh) > 1e-3, "{case}: memory had no effect");
    }
}

#[test]
fn a_wrong_latent_width_and_a_bad_config_name_what_is_wrong() {
    let d = load("wan");
    let err = d.decode(&Tensor::zeros([1, 4, 2, 4, 4], (Kind::Float, Device::Cpu))).unwrap_err().to_string();
    assert!(err.contains("[B, 16, T, H, W]"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), r#"{"latent_channels": 16}"#).unwrap();
    let err = format!("{:#}", TinyVideoDecoder::load(dir.path(), Device::Cpu, Kind::Float).err().unwrap());
    assert!(err.contains("config.json"), "{err}");
}
