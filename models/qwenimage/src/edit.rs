//! Qwen-Image-Edit's conditioning: each picture twice — small (about 384², Edit-Plus; about a
//! megapixel, Edit) through Qwen2.5-VL's vision tower into the prompt, where its tokens take
//! 3-D rotary positions (frame, row, column: the corrected positions, diffusers #14194), and at
//! about a megapixel through the VAE into reference latents packed after the noise tokens.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use fastvideo_layers::image_processor::pil::{self, Filter};
use fastvideo_qwen::vision::processor::{patchify, ProcessorConfig};
use fastvideo_qwen::vision::{VisionConfig, VisionTower};
use fastvideo_request::InputImage;
use fastvideo_torch::weights::Weights;
use fastvideo_wan::AutoencoderKLWan;
use serde_json::Value;
use tch::{Device, Kind, Tensor};

use crate::latents::pack;

/// An edit's pictures as the vision tower's language tokens.
pub struct PictureTokens {
    /// `[Σ tokens, width]`, the pictures' in order.
    pub features: Tensor,
    /// Each picture's patch grid `(rows, columns)`.
    pub grids: Vec<(i64, i64)>,
}

impl PictureTokens {
    /// How many pictures.
    pub fn len(&self) -> usize {
        self.grids.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.grids.is_empty()
    }
}

/// Which edit pipeline a folder is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditKind {
    /// `QwenImageEditPipeline`: one picture, seen at about a megapixel by both paths.
    Edit,
    /// `QwenImageEditPlusPipeline`: several pictures, each named in the prompt.
    EditPlus,
}

/// The edit pipelines' template (`prompt_template_encode`), the picture tags before `{}`.
const SYSTEM: &str = "<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, objects, background), then explain how the user's text instruction should alter or modify the image. Generate a new image that meets the user's requirements while maintaining consistency with the original input where appropriate.<|im_end|>\n<|im_start|>user\n";

/// Template tokens the edit pipelines drop.
pub const DROP: usize = 64;

/// The pictures' size for the vision tower (Edit-Plus).
pub const CONDITION_AREA: f64 = 384.0 * 384.0;

/// The pictures' size for the VAE, and the output's default.
pub const VAE_AREA: f64 = 1024.0 * 1024.0;

/// `calculate_dimensions`: `(width, height)` of about `area` pixels at aspect `ratio`, each a
/// multiple of 32 (Python's rounding, halves to even).
pub fn calculate_dimensions(area: f64, ratio: f64) -> (i64, i64) {
    let width = (area * ratio).sqrt();
    let height = width / ratio;
    let r = |x: f64| ((x / 32.0).round_ties_even() * 32.0) as i64;
    (r(width), r(height))
}

/// The vision path of an edit folder.
pub struct EditEncoder {
    /// Which pipeline.
    pub kind: EditKind,
    vision: VisionTower,
    processor: ProcessorConfig,
    image_pad: i64,
    sections: [i64; 3],
}

// SAFETY: read-only after loading.
unsafe impl Sync for EditEncoder {}

impl EditEncoder {
    /// The vision tower of `text_encoder/` (its `visual.*` weights), `processor/`'s settings.
    pub fn load(
        kind: EditKind,
        text_encoder: &Path,
        processor_dir: &Path,
        device: Device,
        dtype: Kind,
    ) -> Result<Self> {
        let cfg_path = text_encoder.join("config.json");
        let text = std::fs::read_to_string(&cfg_path).with_context(|| format!("reading {}", cfg_path.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", cfg_path.display()))?;
        let image_pad = v.get("image_token_id").and_then(Value::as_i64);
        let image_pad = image_pad.with_context(|| format!("{}: no `image_token_id`", cfg_path.display()))?;
        let sections = mrope_sections(&v).with_context(|| format!("{}", cfg_path.display()))?;
        let vision_cfg = VisionConfig::load(&cfg_path)?;
        let w = Weights::from_dir(text_encoder, "model", device, dtype)?;
        let vision = VisionTower::new(vision_cfg, &w.pp("visual"))?;
        let processor = ProcessorConfig::load(processor_dir)?;
        ensure!(
            processor.patch_size == vision.config().patch_size
                && processor.merge_size == vision.config().spatial_merge_size,
            "{}: the processor's patches ({} px, merge {}) are not the vision tower's",
            processor_dir.display(),
            processor.patch_size,
            processor.merge_size
        );
        Ok(Self { kind, vision, processor, image_pad, sections })
    }

    /// The encoder of a vision tower, processor settings, the picture-pad token and the text
    /// model's `mrope_section` (random weights for benchmarks).
    pub fn new(
        kind: EditKind,
        vision: VisionTower,
        processor: ProcessorConfig,
        image_pad: i64,
        sections: [i64; 3],
    ) -> Self {
        Self { kind, vision, processor, image_pad, sections }
    }

    /// The template with `prompt` and one tag per picture.
    pub fn text(&self, prompt: &str, pictures: usize) -> String {
        let tags: String = match self.kind {
            EditKind::EditPlus => {
                (1..=pictures).map(|i| format!("Picture {i}: <|vision_start|><|image_pad|><|vision_end|>")).collect()
            }
            EditKind::Edit => "<|vision_start|><|image_pad|><|vision_end|>".into(),
        };
        format!("{SYSTEM}{tags}{prompt}<|im_end|>\n<|im_start|>assistant\n")
    }

    /// A picture resized (PIL Lanczos) for the vision tower.
    pub fn condition_picture(&self, im: &InputImage) -> (Vec<u8>, i64, i64) {
        let area = if self.kind == EditKind::EditPlus { CONDITION_AREA } else { VAE_AREA };
        resized(im, area)
    }

    /// The pictures as language tokens: resized for the tower, processed, through the vision
    /// tower once (every prompt of the request reuses them).
    pub fn pictures(&self, pictures: &[&InputImage], device: Device) -> PictureTokens {
        let (mut patches, mut grids) = (Vec::new(), Vec::new());
        for im in pictures {
            let (rgb, w, h) = self.condition_picture(im);
            let p = patchify(&self.processor, &rgb, h, w, device);
            patches.push(p.pixels);
            grids.push(p.grid);
        }
        let features = match patches.is_empty() {
            true => Tensor::new(),
            false => self.vision.forward(&Tensor::cat(&patches, 0), &grids),
        };
        PictureTokens { features, grids }
    }

    /// The prompt's ids with each picture's pad expanded to its tokens, and the 3-D positions
    /// `[3, T]` (text sequential, each picture's tokens at its row and column after the text
    /// before it, the text after continuing past its larger side).
    pub fn prompt_inputs(&self, ids: &[i64], pictures: &PictureTokens, device: Device) -> Result<(Vec<i64>, Tensor)> {
        let m = self.processor.merge_size;
        let pads = ids.iter().filter(|&&i| i == self.image_pad).count();
        let n = pictures.grids.len();
        ensure!(pads == n, "the prompt holds {pads} picture tags for {n} pictures");
        let mut expanded = Vec::new();
        let (mut t, mut h, mut w) = (Vec::new(), Vec::new(), Vec::new());
        let mut pos = 0i64;
        let mut next_grid = pictures.grids.iter();
        for &id in ids {
            if id != self.image_pad {
                expanded.push(id);
                t.push(pos);
                h.push(pos);
                w.push(pos);
                pos += 1;
                continue;
            }
            let &(gh, gw) = next_grid.next().expect("counted above");
            let (lh, lw) = (gh / m, gw / m);
            for y in 0..lh {
                for x in 0..lw {
                    expanded.push(self.image_pad);
                    t.push(pos);
                    h.push(pos + y);
                    w.push(pos + x);
                }
            }
            pos += lh.max(lw);
        }
        let positions = Tensor::stack(&[Tensor::from_slice(&t), Tensor::from_slice(&h), Tensor::from_slice(&w)], 0);
        Ok((expanded, positions.to_device(device)))
    }

    /// `mrope_section` of the text model.
    pub fn sections(&self) -> [i64; 3] {
        self.sections
    }

    /// The picture-pad token id.
    pub fn image_pad(&self) -> i64 {
        self.image_pad
    }
}

/// The text model's `mrope_section` in a Qwen2.5-VL `config.json` (nested `text_config` or
/// top level; `rope_parameters` or the older `rope_scaling`).
pub fn mrope_sections(config: &Value) -> Result<[i64; 3]> {
    let text_cfg = config.get("text_config").unwrap_or(config);
    let rope = text_cfg.get("rope_parameters").or(text_cfg.get("rope_scaling"));
    let sections: Vec<i64> = rope
        .and_then(|r| r.get("mrope_section"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    ensure!(sections.len() == 3, "the text model has no 3-part `mrope_section`");
    Ok([sections[0], sections[1], sections[2]])
}

/// `im` resized with PIL's Lanczos to `calculate_dimensions(area, its aspect)`: RGB8, width,
/// height.
pub fn resized(im: &InputImage, area: f64) -> (Vec<u8>, i64, i64) {
    let (w, h) = calculate_dimensions(area, im.width as f64 / im.height as f64);
    let rgb = match (w as u32, h as u32) == (im.width, im.height) {
        true => im.rgb.clone(),
        false => pil::resize(Filter::Lanczos, &im.rgb, im.width as usize, im.height as usize, w as usize, h as usize),
    };
    (rgb, w, h)
}

/// A picture's reference latents: resized to about a megapixel, encoded (the posterior's
/// mean), normalised by the VAE's statistics, packed `[(h/2)·(w/2), 4·z]`; and its token grid.
pub fn reference_latents(vae: &AutoencoderKLWan, im: &InputImage, device: Device) -> Result<(Tensor, (i64, i64))> {
    let (rgb, w, h) = resized(im, VAE_AREA);
    let pixels = Tensor::from_slice(&rgb).view([h, w, 3]).permute([2, 0, 1]).to_kind(Kind::Float) / 255.0 * 2.0 - 1.0;
    let z = vae.encode(&pixels.unsqueeze(0).unsqueeze(2).to_device(device))?;
    let c = &vae.cfg;
    let n = c.z_dim;
    let stat = |v: &[f64]| {
        Tensor::from_slice(&v.iter().map(|x| *x as f32).collect::<Vec<_>>()).to_device(device).view([1, n, 1, 1, 1])
    };
    let z = (z - stat(&c.latents_mean)) / stat(&c.latents_std);
    let (_, _, _, lh, lw) = z.size5()?;
    Ok((pack(&z).squeeze_dim(0), (lh / 2, lw / 2)))
}
