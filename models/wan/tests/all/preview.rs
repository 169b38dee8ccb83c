//! Live previews on the shipped default model: a preview shows what the model's VAE decodes of
//! the latents' last frame (JPEG aside), in place; at large sizes the latents are pooled first,
//! which blurs but keeps the colours.

use std::path::Path;
use std::sync::Arc;

use fastvideo_pipeline::LatentPreview;
use fastvideo_wan::loader::WanModel;
use fastvideo_wan::preview::WanPreview;
use tch::{Device, Kind, Tensor};

/// JPEG at quality 80 on flat colours: mean absolute error per channel, in [-1, 1] units.
const JPEG_TOLERANCE: f64 = 0.05;
/// The pooled preview's half means against the unpooled ones: pooling latents is not pooling
/// pixels (the decoder is not linear), measured 0.22 at most on these colours.
const POOL_TOLERANCE: f64 = 0.3;

/// A frame `[1, 3, 1, h, w]` whose left half is `left` and right half `right`.
fn halves(h: i64, w: i64, left: [f32; 3], right: [f32; 3]) -> Tensor {
    let frame = Tensor::zeros([1, 3, 1, h, w], (Kind::Float, Device::Cpu));
    for (half, c) in [(0, left), (1, right)] {
        for (ch, v) in c.iter().enumerate() {
            let _ = frame.narrow(1, ch as i64, 1).narrow(4, half * w / 2, w / 2).fill_(*v as f64);
        }
    }
    frame
}

/// The JPEG as `[3, h, w]` in [-1, 1].
fn pixels(jpeg: &[u8]) -> Tensor {
    let img = image::load_from_memory_with_format(jpeg, image::ImageFormat::Jpeg).unwrap().to_rgb8();
    let (w, h) = (img.width() as i64, img.height() as i64);
    Tensor::from_slice(img.as_raw()).view([h, w, 3]).permute([2, 0, 1]).to_kind(Kind::Float) / 127.5 - 1.0
}

/// Mean colour of the middle of each half, away from the seam: `[[r, g, b]; 2]`.
fn half_means(rgb: &Tensor) -> Vec<Vec<f64>> {
    let (h, w) = (rgb.size()[1], rgb.size()[2]);
    (0..2)
        .map(|half| {
            let part = rgb.narrow(1, h / 4, h / 2).narrow(2, half * w / 2 + w / 8, w / 4);
            Vec::<f64>::try_from(part.mean_dim(&[1i64, 2][..], false, Kind::Double)).unwrap()
        })
        .collect()
}

#[test]
fn previews_show_what_the_vae_decodes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../default");
    let model = WanModel::load(&dir, Device::Cpu).unwrap();
    let preview = WanPreview::new(Arc::clone(&model.vae));
    // Red and blue: colours of the default model's world (its VAE does not round-trip teal).
    let (left, right) = ([0.8f32, -0.8, -0.8], [-0.8f32, -0.8, 0.8]);

    let latents = model.vae.normalize(&model.vae.encode(&halves(64, 128, left, right)).unwrap());
    let (w, h, jpeg) = preview.preview(&latents).unwrap();
    assert_eq!((w, h), (128, 64), "one decoded frame, unpooled at this size");
    let decoded = model.vae.decode(&model.vae.denormalize(&latents)).unwrap().get(0).select(1, 0);
    let shown = pixels(&jpeg);
    let err = (&shown - &decoded).abs().mean(Kind::Double).double_value(&[]);
    assert!(err < JPEG_TOLERANCE, "preview vs the VAE's decode: {err}");
    let m = half_means(&shown);
    assert!(m[0][0] > m[1][0] + 0.5 && m[1][2] > m[0][2] + 0.5, "red left, blue right: {m:?}");

    // Four times the size: the latents are pooled to 32 across, so the picture is 256x128.
    let big = model.vae.normalize(&model.vae.encode(&halves(256, 512, left, right)).unwrap());
    let (w, h, jpeg) = preview.preview(&big).unwrap();
    assert_eq!((w, h), (256, 128));
    let pooled = half_means(&pixels(&jpeg));
    assert!(pooled[0][0] > pooled[1][0] + 0.5 && pooled[1][2] > pooled[0][2] + 0.5, "{pooled:?}");
    for (p, u) in pooled.iter().flatten().zip(m.iter().flatten()) {
        assert!((p - u).abs() < POOL_TOLERANCE, "pooled {pooled:?} vs unpooled {m:?}");
    }
}
