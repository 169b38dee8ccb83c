//! An edit's reference pictures as the pipeline uses them: scaled down to about a megapixel
//! when larger (PIL Lanczos), centre-cropped to multiples of the token size, encoded by the
//! VAE (the posterior's mode), patchified, normalised by the BatchNorm statistics and packed
//! after the noise tokens at times 10, 20, … .

use std::sync::Arc;

use anyhow::Result;
use fastvideo_layers::image_processor::pil::{self, Filter};
use fastvideo_pipeline::{NodeCtx, Stage, Value, Values};
use fastvideo_request::{ImageRole, InputImage, ReferenceLimits};
use tch::{Kind, Tensor};

use crate::packed::positions;
use crate::vae::{patchify, Flux2Vae};
use crate::values::{REFERENCE_IDS, REFERENCE_TOKENS};

/// The reference rules of FLUX.2 [klein] (the pipeline's `check_image_input` and its area cap).
pub const REFERENCES: ReferenceLimits = ReferenceLimits {
    max_references: 4,
    min_reference_side: 64,
    max_reference_aspect: 8.0,
    max_reference_area: 1024 * 1024,
    scale_to_area: false,
};

/// Pixels `[1, 3, H, W]` in [-1, 1] of a reference as the pipeline prepares it: scaled to
/// the area cap, then centre-cropped to multiples of `multiple`.
pub fn prepare(im: &InputImage, multiple: u32) -> Tensor {
    let (w, h) = (im.width as usize, im.height as usize);
    let (sw, sh) = REFERENCES.used_size(im.width, im.height, 1);
    let (rgb, w, h) = match (sw as usize, sh as usize) {
        (nw, nh) if (nw, nh) != (w, h) => (pil::resize(Filter::Lanczos, &im.rgb, w, h, nw, nh), nw, nh),
        _ => (im.rgb.clone(), w, h),
    };
    let (cw, ch) = (w / multiple as usize * multiple as usize, h / multiple as usize * multiple as usize);
    let (left, top) = ((w - cw) / 2, (h - ch) / 2);
    let t = Tensor::from_slice(&rgb).view([h as i64, w as i64, 3]);
    let t = t.narrow(0, top as i64, ch as i64).narrow(1, left as i64, cw as i64);
    (t.permute([2, 0, 1]).to_kind(Kind::Float) / 255.0 * 2.0 - 1.0).unsqueeze(0)
}

/// Encodes the request's reference pictures.
pub struct References {
    /// The autoencoder.
    pub vae: Arc<Flux2Vae>,
}

impl Stage for References {
    fn run(&self, ctx: &NodeCtx, values: &mut Values) -> Result<()> {
        let multiple = 2 * self.vae.cfg.scale_factor() as u32;
        let mut tokens = Vec::new();
        let mut ids = Vec::new();
        let refs = ctx.request.images.iter().filter(|i| i.role == ImageRole::Reference);
        for (i, im) in refs.enumerate() {
            let pixels = prepare(im, multiple).to_device(ctx.device);
            let z = self.vae.normalize(&patchify(&self.vae.encode(&pixels)));
            let (_, c, h, w) = z.size4()?;
            tokens.push(z.squeeze_dim(0).view([c, h * w]).tr());
            ids.push(positions(10 * (i as i64 + 1), h, w, ctx.device));
        }
        if !tokens.is_empty() {
            values.insert(REFERENCE_TOKENS, Value::Tensor(Tensor::cat(&tokens, 0)));
            values.insert(REFERENCE_IDS, Value::Tensor(Tensor::cat(&ids, 0)));
        }
        Ok(())
    }
}
