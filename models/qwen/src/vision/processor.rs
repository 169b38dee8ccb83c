//! Qwen2-VL's image processor as transformers 5 runs it (its torchvision backend): the picture
//! resized to multiples of 28 pixels within a pixel budget (`smart_resize`, ATen's antialiased
//! bicubic on the 8-bit values), normalised with CLIP's mean and deviation, and laid
//! out as rows of 2×14×14 patches (the frame repeated), 2×2 merge groups one after another.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use tch::{Device, Kind, Tensor};

/// What `preprocessor_config.json` sets.
#[derive(Clone, Debug)]
pub struct ProcessorConfig {
    /// Fewest pixels after resizing.
    pub min_pixels: i64,
    /// Most pixels after resizing.
    pub max_pixels: i64,
    /// Patch side in pixels.
    pub patch_size: i64,
    /// Frames a patch spans (a picture is repeated to fill them).
    pub temporal_patch_size: i64,
    /// Patches per merge group side.
    pub merge_size: i64,
    /// Per-channel mean, in [0, 1].
    pub mean: [f64; 3],
    /// Per-channel deviation, in [0, 1].
    pub std: [f64; 3],
}

impl Default for ProcessorConfig {
    fn default() -> Self {
        Self {
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            mean: [0.48145466, 0.4578275, 0.40821073],
            std: [0.26862954, 0.26130258, 0.27577711],
        }
    }
}

impl ProcessorConfig {
    /// Reads a processor folder: `processor_config.json`'s `image_processor` (transformers 5)
    /// or `preprocessor_config.json` (older writers). Keys left out take the processor's
    /// defaults; the size is `size.shortest_edge` / `longest_edge` or the older `min_pixels` /
    /// `max_pixels`.
    pub fn load(dir: &Path) -> Result<Self> {
        let nested = dir.join("processor_config.json");
        let (path, v) = if nested.is_file() {
            let v = read_json(&nested)?;
            let inner = v.get("image_processor").cloned();
            (nested, inner.with_context(|| format!("{}: no `image_processor`", dir.display()))?)
        } else {
            let flat = dir.join("preprocessor_config.json");
            let v = read_json(&flat)?;
            (flat, v)
        };
        let path = path.as_path();
        let mut c = Self::default();
        let int = |key: &str| v.get(key).and_then(Value::as_i64);
        let size = |key: &str| v.get("size").and_then(|s| s.get(key)).and_then(Value::as_i64);
        c.min_pixels = size("shortest_edge").or(int("min_pixels")).unwrap_or(c.min_pixels);
        c.max_pixels = size("longest_edge").or(int("max_pixels")).unwrap_or(c.max_pixels);
        c.patch_size = int("patch_size").unwrap_or(c.patch_size);
        c.temporal_patch_size = int("temporal_patch_size").unwrap_or(c.temporal_patch_size);
        c.merge_size = int("merge_size").unwrap_or(c.merge_size);
        let triple = |key: &str| -> Result<Option<[f64; 3]>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) if a.len() == 3 => {
                    let f: Vec<f64> = a.iter().filter_map(Value::as_f64).collect();
                    if f.len() != 3 {
                        bail!("{}: `{key}` must hold three numbers", path.display());
                    }
                    Ok(Some([f[0], f[1], f[2]]))
                }
                Some(other) => bail!("{}: `{key}` = {other} must be three numbers", path.display()),
            }
        };
        c.mean = triple("image_mean")?.unwrap_or(c.mean);
        c.std = triple("image_std")?.unwrap_or(c.std);
        if v.get("do_resize") == Some(&Value::Bool(false)) {
            bail!("{}: `do_resize` false is not served", path.display());
        }
        Ok(c)
    }

    /// `(height, width)` a picture is resized to: `smart_resize` with factor `patch · merge`.
    pub fn smart_resize(&self, height: i64, width: i64) -> (i64, i64) {
        let factor = (self.patch_size * self.merge_size) as f64;
        let (h, w) = (height as f64, width as f64);
        // Python's round: halves to even.
        let round = |x: f64| (x / factor).round_ties_even() * factor;
        let (mut hb, mut wb) = (round(h), round(w));
        if hb * wb > self.max_pixels as f64 {
            let beta = (h * w / self.max_pixels as f64).sqrt();
            hb = factor.max((h / beta / factor).floor() * factor);
            wb = factor.max((w / beta / factor).floor() * factor);
        } else if hb * wb < self.min_pixels as f64 {
            let beta = (self.min_pixels as f64 / (h * w)).sqrt();
            hb = (h * beta / factor).ceil() * factor;
            wb = (w * beta / factor).ceil() * factor;
        }
        (hb as i64, wb as i64)
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))
}

/// A picture's patches and grid.
pub struct Patches {
    /// `[rows · columns, C · temporal · patch²]` float32.
    pub pixels: Tensor,
    /// `(rows, columns)` of patches.
    pub grid: (i64, i64),
}

/// `rgb` (`height`×`width` RGB8, row-major) as the processor prepares it.
pub fn patchify(c: &ProcessorConfig, rgb: &[u8], height: i64, width: i64, device: Device) -> Patches {
    let img = Tensor::from_slice(rgb).view([1, height, width, 3]).permute([0, 3, 1, 2]);
    let (rh, rw) = c.smart_resize(height, width);
    let img = if (rh, rw) == (height, width) {
        img.to_kind(Kind::Float)
    } else {
        // torchvision's bicubic resize of 8-bit pictures: ATen's antialiased kernel on the 8-bit
        // values themselves (its fixed-point path), on the CPU.
        img.internal_upsample_bicubic2d_aa([rh, rw], false, None, None).to_kind(Kind::Float)
    };
    let mean = Tensor::from_slice(&c.mean.map(|m| (m * 255.0) as f32)).view([1, 3, 1, 1]);
    let std = Tensor::from_slice(&c.std.map(|s| (s * 255.0) as f32)).view([1, 3, 1, 1]);
    let x = (img - mean) / std;
    let (ps, m, tps) = (c.patch_size, c.merge_size, c.temporal_patch_size);
    let (gh, gw) = (rh / ps, rw / ps);
    let p = x.reshape([1, 3, gh / m, m, ps, gw / m, m, ps]).permute([0, 2, 5, 3, 6, 1, 4, 7]);
    let p = p.unsqueeze(6).expand([-1, -1, -1, -1, -1, -1, tps, -1, -1], false).reshape([gh * gw, 3 * tps * ps * ps]);
    Patches { pixels: p.to_device(device), grid: (gh, gw) }
}
