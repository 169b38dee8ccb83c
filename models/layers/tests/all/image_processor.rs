//! The CLIP image processor against transformers: the torchvision backend on the tiny
//! image-to-video folder's config (fixtures from tests/fixtures/make_i2v_fixtures.py) and the PIL
//! backend on tests/fixtures/make_clip_pil_fixture.py's cases.

use std::collections::HashMap;

use fastvideo_layers::image_processor::pil::{coefficients, resize_bicubic, PRECISION_BITS};
use fastvideo_layers::image_processor::{ImageProcessorConfig, ProcessorBackend, Rgb8};
use tch::{Device, Tensor};

use crate::fixture_path;

fn fixtures(file: &str) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(fixture_path(file)).expect("fixture readable").into_iter().collect()
}

/// The tiny image-to-video folder's `preprocessor_config.json` with `backend`.
fn tiny_i2v_processor(backend: ProcessorBackend) -> ImageProcessorConfig {
    let mut p = ImageProcessorConfig::load(&fixture_path("tiny-wan-i2v/image_processor/preprocessor_config.json"))
        .expect("the tiny folder's processor config loads");
    p.backend = backend;
    p
}

/// A `[H, W, 3]` uint8 tensor's bytes, width and height.
fn rgb(t: &Tensor) -> (Vec<u8>, u32, u32) {
    let (h, w, _) = t.size3().unwrap();
    (Vec::<u8>::try_from(t.flatten(0, -1)).unwrap(), w as u32, h as u32)
}

#[test]
fn clip_image_processor_matches_transformers() {
    let fx = fixtures("wan_i2v.safetensors");
    let p = tiny_i2v_processor(ProcessorBackend::Torchvision);
    let (data, width, height) = rgb(&fx["processor.image"]);
    let out = p.preprocess(&[Rgb8 { width, height, data: &data }], Device::Cpu).unwrap();
    // Same libtorch kernel (antialiased bicubic on uint8), same crop, same fused normalisation.
    let diff = (&out - &fx["processor.pixel_values"]).abs().max().double_value(&[]);
    eprintln!("clip processor: max abs error {diff:.3e}");
    assert!(diff < 1e-5, "processor max abs error {diff}"); // tolerance 1e-5 (float32 rounding)
}

/// Case `i` of clip_pil_processor.safetensors: its picture and what transformers'
/// `CLIPImageProcessorPil` made of it.
fn pil_case(fx: &HashMap<String, Tensor>, i: usize, config: &str) -> (Vec<u8>, u32, u32, Tensor) {
    let (data, w, h) = rgb(&fx[&format!("{i}.{config}.picture")]);
    (data, w, h, fx[&format!("{i}.{config}.pixel_values")].shallow_clone())
}

fn max_diff(p: &ImageProcessorConfig, (rgb, w, h, want): &(Vec<u8>, u32, u32, Tensor)) -> f64 {
    let out = p.preprocess(&[Rgb8 { width: *w, height: *h, data: rgb }], Device::Cpu).unwrap();
    assert_eq!(out.size()[1..], want.size()[..], "pixel_values shape");
    (out.squeeze_dim(0) - want).abs().max().double_value(&[])
}

#[test]
fn the_pil_processor_matches_transformers_to_the_bit() {
    let fx = fixtures("clip_pil_processor.safetensors");
    // PIL's fixed-point bicubic and NumPy's float64 rescale reproduced: exact on every case
    // (shrinking, enlarging, the size kept). Config "a" is the tiny folder's.
    let a = tiny_i2v_processor(ProcessorBackend::Pil);
    for i in 0..3 {
        let d = max_diff(&a, &pil_case(&fx, i, "a"));
        assert_eq!(d, 0.0, "case {i}: max abs error {d}");
    }
    // A crop that is not square, with odd offsets.
    let json = r#"{"size": {"shortest_edge": 40}, "crop_size": {"height": 36, "width": 32},
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}"#;
    let mut b: ImageProcessorConfig = serde_json::from_str(json).unwrap();
    b.backend = ProcessorBackend::Pil;
    for i in 3..5 {
        let d = max_diff(&b, &pil_case(&fx, i, "b"));
        assert_eq!(d, 0.0, "case {i}: max abs error {d}");
    }
    // The torchvision backend computes something else: an 8-bit step apart here and there.
    b.backend = ProcessorBackend::Torchvision;
    let d = max_diff(&b, &pil_case(&fx, 3, "b"));
    eprintln!("torchvision backend vs CLIPImageProcessorPil: max abs difference {d:.3e}");
    assert!(d > 1e-2, "torchvision vs PIL: {d}");
}

#[test]
fn pil_weights_sum_to_one_in_fixed_point_and_a_flat_picture_stays_flat() {
    for (i, o) in [(50, 32), (23, 32), (7, 3), (3, 7), (1, 5)] {
        for (_, k) in coefficients(i, o) {
            let sum: i64 = k.iter().map(|&v| v as i64).sum();
            assert!((sum - (1 << PRECISION_BITS)).abs() <= k.len() as i64, "{i}->{o}: {sum}");
        }
    }
    let flat = vec![77u8; 9 * 5 * 3];
    assert!(resize_bicubic(&flat, 9, 5, 4, 11).iter().all(|&v| v == 77));
    // An unchanged size is not resampled at all.
    let p: Vec<u8> = (0..27).collect();
    assert_eq!(resize_bicubic(&p, 3, 3, 3, 3), p);
}
