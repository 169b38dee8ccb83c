//! The video VAE's decoder against diffusers' `AutoencoderKLLTX2Video.decode` (float32, CPU;
//! tests/fixtures/make_ltx2_fixtures.py): a causal and a centred decoder with a residual
//! spatio-temporal upsampler, a plain spatial one, reflect padding and the 2×2 unpatchify.

use fastvideo_ltx2::Ltx2VideoDecoder;
use tch::{Device, Kind};

use crate::common::{fixture, load, rel};

/// float32 on both sides: summation order only.
#[test]
fn causal_and_centred_video_decoders_match_diffusers() {
    let f = load("video_vae.safetensors");
    for (folder, key) in [("video_vae", "video_causal"), ("video_vae_centred", "video_centred")] {
        let d = Ltx2VideoDecoder::load(&fixture(folder), Device::Cpu, Kind::Float).unwrap();
        let video = d.decode(&f["latents"], None).unwrap();
        let e = rel(&video, &f[key]);
        eprintln!("{key}: {e:.2e}");
        assert!(e < 1e-5, "{key}: {e:.2e}");
    }
    assert!(rel(&f["video_causal"], &f["video_centred"]) > 1e-3, "the two paddings differ");
}

/// The encoder (spatio-temporal downsamplers with their channel-averaged shortcuts, the patch
/// order) against `AutoencoderKLLTX2Video.encode(...).latent_dist.mode()` of the tiny folder's
/// VAE (tests/fixtures/make_ltx2_pipeline_fixtures.py). float32: summation order only.
#[test]
fn the_encoder_matches_the_posterior_mode() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-ltx2/vae");
    let enc = fastvideo_ltx2::Ltx2VideoEncoder::load(&dir, tch::Device::Cpu, tch::Kind::Float).unwrap();
    let f = crate::common::load("vae_encode.safetensors");
    let out = enc.encode(&f["pixels"]).unwrap();
    assert_eq!(out.size(), f["latents"].size());
    let e = crate::common::rel(&out, &f["latents"]);
    eprintln!("video encoder: {e:.2e}");
    assert!(e < 1e-5, "video encoder: {e:.2e}");
}

/// Image to video's first frame as `LTX2ImageToVideoPipeline.prepare_latents` makes it: the
/// picture (56x40) resized to 32x32 by its video processor (PIL bilinear), encoded (posterior
/// mode), normalised without the scaling factor. float32: summation order only.
#[test]
fn the_first_frame_condition_matches_the_image_to_video_pipeline() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let model = fastvideo_ltx2::Ltx2Model::load(
        &root.join("tiny-ltx2"),
        tch::Device::Cpu,
        (tch::Kind::Float, tch::Kind::Float, tch::Kind::Float),
    )
    .unwrap();
    let png = image::open(root.join("ltx2/first_frame.png")).unwrap().to_rgb8();
    let picture = fastvideo_request::InputImage {
        role: fastvideo_request::ImageRole::FirstFrame,
        width: png.width(),
        height: png.height(),
        rgb: png.into_raw(),
    };
    let stats = fastvideo_ltx2::pipeline::statistics(&model);
    let z = fastvideo_ltx2::condition::condition_latents(&model.encoder, &stats, &picture, (32, 32), tch::Device::Cpu)
        .unwrap();
    let f = crate::common::load("i2v.safetensors");
    let e = crate::common::rel(&z, &f["condition"]);
    eprintln!("first frame condition: {e:.2e}");
    assert!(e < 1e-5, "first frame condition: {e:.2e}");
}
