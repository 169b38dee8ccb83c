//! `image_processor/preprocessor_config.json` (transformers `CLIPImageProcessor`) and the
//! preprocessing it describes: RGB8 pictures → the CLIP encoder's `pixel_values`.
//!
//! transformers 5's `CLIPImageProcessor` is torchvision-backed: the shortest edge is resized with
//! antialiased bicubic interpolation on the uint8 image (libtorch's `_upsample_bicubic2d_aa`, which
//! is what runs here too, on the CPU), then center-cropped, then rescaled and normalised in one
//! float32 pass. `CLIPImageProcessorPil` (what a folder saved without torchvision names) resizes
//! with PIL's fixed-point bicubic instead ([`pil`]), then rescales in float64 before float32 and
//! normalises apart, as its NumPy steps do. The two backends' outputs differ by an 8-bit step
//! here and there, so each folder gets the backend it names.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use serde::Deserialize;
use tch::{Device, Kind, Tensor};

pub mod pil;

/// Which of transformers' implementations of the processor the folder names (`model_index.json`;
/// the config file is the same for both).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProcessorBackend {
    /// `CLIPImageProcessor`, `CLIPImageProcessorFast`: torchvision.
    #[default]
    Torchvision,
    /// `CLIPImageProcessorPil`: PIL and NumPy.
    Pil,
}

impl ProcessorBackend {
    /// The backend of a `model_index.json` class name; `None` for a class that is not CLIP's
    /// image processor.
    pub fn of_class(class: &str) -> Option<Self> {
        match class {
            "CLIPImageProcessor" | "CLIPImageProcessorFast" => Some(Self::Torchvision),
            "CLIPImageProcessorPil" => Some(Self::Pil),
            _ => None,
        }
    }
}

/// A size as transformers' processors give it: a shortest edge, or a height and width.
#[derive(Debug, Clone, Deserialize)]
pub struct SizeSpec {
    /// Resize so the shorter side is this long.
    #[serde(default)]
    pub shortest_edge: Option<i64>,
    /// Target height in pixels.
    #[serde(default)]
    pub height: Option<i64>,
    /// Target width in pixels.
    #[serde(default)]
    pub width: Option<i64>,
}

/// `preprocessor_config.json`. Keys beyond these are accepted and logged (processor configs carry
/// provenance keys that vary between library versions).
#[derive(Debug, Clone, Deserialize)]
pub struct ImageProcessorConfig {
    /// Resize to `size` first.
    #[serde(default = "yes")]
    pub do_resize: bool,
    /// What resizing aims at.
    pub size: SizeSpec,
    /// PIL's resampling code: 3 = bicubic (the only one implemented).
    #[serde(default = "bicubic")]
    pub resample: i64,
    /// Crop the middle to `crop_size` after resizing.
    #[serde(default = "yes")]
    pub do_center_crop: bool,
    /// What center cropping cuts to.
    pub crop_size: SizeSpec,
    /// Multiply the 0..255 values by `rescale_factor`.
    #[serde(default = "yes")]
    pub do_rescale: bool,
    /// What rescaling multiplies by (1/255 when absent).
    #[serde(default = "rescale")]
    pub rescale_factor: f64,
    /// Normalise each channel with `image_mean` and `image_std`.
    #[serde(default = "yes")]
    pub do_normalize: bool,
    /// Per RGB channel: the mean normalisation subtracts.
    pub image_mean: [f32; 3],
    /// Per RGB channel: the standard deviation normalisation divides by.
    pub image_std: [f32; 3],
    /// Convert to RGB first (inputs here are RGB already).
    #[serde(default = "yes")]
    pub do_convert_rgb: bool,
    /// Set by the loader from the class `model_index.json` names.
    #[serde(skip)]
    pub backend: ProcessorBackend,
    /// Every other key, kept to be logged.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

fn yes() -> bool {
    true
}
fn bicubic() -> i64 {
    3
}
fn rescale() -> f64 {
    1.0 / 255.0
}

/// One RGB8 picture, row-major `[height, width, 3]`.
pub struct Rgb8<'a> {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// `height * width * 3` bytes.
    pub data: &'a [u8],
}

impl ImageProcessorConfig {
    /// Reads `preprocessor_config.json`, logging keys it does not use.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let cfg: Self = serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        for (k, v) in &cfg.other {
            tracing::debug!(file = %path.display(), key = %k, value = %v, "image processor key not used");
        }
        if cfg.do_resize && cfg.resample != 3 {
            bail!("{}: config key `resample` = {} is not supported (3, bicubic)", path.display(), cfg.resample);
        }
        if cfg.do_resize && cfg.size.shortest_edge.is_none() {
            bail!("{}: config key `size` must give `shortest_edge`", path.display());
        }
        if cfg.do_center_crop && (cfg.crop_size.height.is_none() || cfg.crop_size.width.is_none()) {
            bail!("{}: config key `crop_size` must give `height` and `width`", path.display());
        }
        Ok(cfg)
    }

    /// The side of the square the encoder receives, when the config makes one.
    pub fn output_side(&self) -> Option<i64> {
        match (self.do_center_crop, self.crop_size.height, self.crop_size.width) {
            (true, Some(h), Some(w)) if h == w => Some(h),
            _ => None,
        }
    }

    /// Pictures → `pixel_values [N, 3, S, S]` float32 on `device`.
    pub fn preprocess(&self, images: &[Rgb8], device: Device) -> Result<Tensor> {
        let rows = images.iter().map(|im| self.one(im)).collect::<Result<Vec<_>>>()?;
        Ok(Tensor::stack(&rows, 0).to_device(device))
    }

    /// `(height, width)` after the resize: transformers' get_resize_output_image_size, the short
    /// side to `shortest_edge`, the long side scaled and truncated.
    fn resized(&self, h: i64, w: i64) -> (i64, i64) {
        let edge = self.size.shortest_edge.expect("checked at load");
        let (short, long) = (h.min(w), h.max(w));
        let long_new = (edge as f64 * long as f64 / short as f64) as i64;
        if h <= w {
            (edge, long_new)
        } else {
            (long_new, edge)
        }
    }

    /// The centred `crop_size` region of `[.., H, W]` (top and left offsets rounded down).
    fn center_crop(&self, x: Tensor) -> Result<Tensor> {
        let (ch, cw) = (self.crop_size.height.expect("checked"), self.crop_size.width.expect("checked"));
        let (ih, iw) = (x.size()[x.dim() - 2], x.size()[x.dim() - 1]);
        ensure!(ch <= ih && cw <= iw, "image processor: a {iw}x{ih} image is smaller than the {cw}x{ch} crop");
        let (top, left) = ((ih - ch) / 2, (iw - cw) / 2);
        Ok(x.narrow(-2, top, ch).narrow(-1, left, cw))
    }

    fn one(&self, im: &Rgb8) -> Result<Tensor> {
        let (h, w) = (im.height as i64, im.width as i64);
        ensure!(im.data.len() as i64 == h * w * 3, "image processor: {}x{} RGB8 needs {} bytes", w, h, h * w * 3);
        if self.backend == ProcessorBackend::Pil {
            return self.one_pil(im);
        }
        let mut x = Tensor::from_slice(im.data).view([h, w, 3]).permute([2, 0, 1]).unsqueeze(0);
        if self.do_resize {
            let (nh, nw) = self.resized(h, w);
            x = x.internal_upsample_bicubic2d_aa([nh, nw], false, None, None);
        }
        if self.do_center_crop {
            x = self.center_crop(x)?;
        }
        let mut x = x.squeeze_dim(0).to_kind(Kind::Float);
        let scale = if self.do_rescale { self.rescale_factor } else { 1.0 };
        if self.do_normalize {
            // Fused as transformers does: (x - mean/scale) / (std/scale), float32 tables.
            let mean = Tensor::from_slice(&self.image_mean) * (1.0 / scale);
            let std = Tensor::from_slice(&self.image_std) * (1.0 / scale);
            x = (x - mean.view([3, 1, 1])) / std.view([3, 1, 1]);
        } else if self.do_rescale {
            x *= scale;
        }
        Ok(x)
    }

    /// `CLIPImageProcessorPil`: PIL's resize on the 8-bit picture, the crop, then NumPy's steps
    /// one at a time: rescale in float64 stored as float32, normalise in float32.
    fn one_pil(&self, im: &Rgb8) -> Result<Tensor> {
        let (mut h, mut w) = (im.height as i64, im.width as i64);
        let mut x = if self.do_resize {
            let (nh, nw) = self.resized(h, w);
            let rgb = pil::resize_bicubic(im.data, w as usize, h as usize, nw as usize, nh as usize);
            (h, w) = (nh, nw);
            Tensor::from_slice(&rgb)
        } else {
            Tensor::from_slice(im.data)
        };
        x = x.view([h, w, 3]).permute([2, 0, 1]);
        if self.do_center_crop {
            x = self.center_crop(x)?;
        }
        let mut x = match self.do_rescale {
            true => (x.to_kind(Kind::Double) * self.rescale_factor).to_kind(Kind::Float),
            false => x.to_kind(Kind::Float),
        };
        if self.do_normalize {
            let mean = Tensor::from_slice(&self.image_mean).view([3, 1, 1]);
            let std = Tensor::from_slice(&self.image_std).view([3, 1, 1]);
            x = (x - mean) / std;
        }
        Ok(x)
    }
}
