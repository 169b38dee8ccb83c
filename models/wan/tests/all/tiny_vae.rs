//! The tiny video decoder against its reference definition (models/training/tiny_vae.py) on tiny
//! random configs, float32 on CPU (fixtures from tests/fixtures/make_tiny_vae_fixtures.py), and
//! streaming: chunk by chunk equals the whole sequence.

use std::path::{Path, PathBuf};

use fastvideo_wan::tiny_vae::{TinyDecodeStream, TinyVideoDecoder, DECODE_CHUNK_FRAMES};
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

/// Chunked against one pass: the same convolutions per frame, only the batch of frames differs,
/// which changes how the CPU's convolutions block their sums: float32 rounding, seen at 1.1e-6
/// of the output's range over twelve convolutions in a row.
const CHUNKED_TOLERANCE: f64 = 1e-5;

#[test]
fn a_long_clip_decodes_in_chunks_exactly_as_in_one_pass() {
    for case in ["wan", "patched"] {
        let d = load(case);
        let c = d.cfg.latent_channels;
        tch::manual_seed(7);
        // 9 latent frames: more than one chunk, and not a multiple of any chunk tried.
        let z = Tensor::randn([1, c, 9, 4, 6], (Kind::Float, Device::Cpu)) * 2.0;
        let one_pass = d.decode_chunked(&z, 9).unwrap();
        assert_eq!(one_pass.size()[2], d.cfg.time_factor() * 8 + 1, "{case}: the full VAE's frame count");
        for chunk in [1, 2, 4, 100] {
            let chunked = d.decode_chunked(&z, chunk).unwrap();
            let e = rel(&chunked, &one_pass);
            assert!(e < CHUNKED_TOLERANCE, "{case}: chunks of {chunk}: relative error {e}");
        }
        const { assert!(DECODE_CHUNK_FRAMES < 9, "the default splits this clip") };
        assert!(rel(&d.decode(&z).unwrap(), &one_pass) < CHUNKED_TOLERANCE, "{case}: decode chunks by default");
        assert!(d.decode_chunked(&z, 0).is_err(), "{case}: chunks of no frames are refused");
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
