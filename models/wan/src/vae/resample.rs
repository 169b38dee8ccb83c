//! Spatial (and, for the 3-D modes, temporal) up- and downsampling between resolution levels.

use anyhow::Result;
use tch::Tensor;

use super::cache::{frames_to_cache, FeatCache, Slot, CACHE_T};
use super::conv::CausalConv3d;
use crate::weights::Weights;

#[derive(Clone, Copy, PartialEq)]
pub(super) enum ResampleMode {
    Up2d,
    Up3d,
    Down2d,
    Down3d,
}

pub(super) struct Resample {
    mode: ResampleMode,
    conv_w: Tensor,
    conv_b: Tensor,
    time_conv: Option<CausalConv3d>,
}

impl Resample {
    /// `up_out`: an upsampler's output width (Wan 2.2 keeps `dim`); `None` halves it (Wan 2.1).
    pub(super) fn new(w: &Weights, dim: i64, mode: ResampleMode, up_out: Option<i64>) -> Result<Self> {
        let up = up_out.unwrap_or(dim / 2);
        let (cout, time_conv) = match mode {
            ResampleMode::Up2d => (up, None),
            ResampleMode::Up3d => {
                (up, Some(CausalConv3d::new(&w.pp("time_conv"), dim, 2 * dim, [3, 1, 1], [1, 1, 1], [1, 0, 0])?))
            }
            ResampleMode::Down2d => (dim, None),
            ResampleMode::Down3d => {
                (dim, Some(CausalConv3d::new(&w.pp("time_conv"), dim, dim, [3, 1, 1], [2, 1, 1], [0, 0, 0])?))
            }
        };
        Ok(Self {
            mode,
            conv_w: w.get("resample.1.weight", &[cout, dim, 3, 3])?,
            conv_b: w.get("resample.1.bias", &[cout])?,
            time_conv,
        })
    }

    pub(super) fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let mut x = x.shallow_clone();
        if self.mode == ResampleMode::Up3d {
            x = self.time_upsample(&x, cache);
        }
        let (b, c, t, h, w) = x.size5().expect("video activations");
        let frames = x.permute([0, 2, 1, 3, 4]).reshape([b * t, c, h, w]);
        let frames = match self.mode {
            ResampleMode::Up2d | ResampleMode::Up3d => frames.upsample_nearest2d([2 * h, 2 * w], None, None).conv2d(
                &self.conv_w,
                Some(&self.conv_b),
                [1, 1],
                [1, 1],
                [1, 1],
                1,
            ),
            ResampleMode::Down2d | ResampleMode::Down3d => {
                frames.constant_pad_nd([0, 1, 0, 1]).conv2d(&self.conv_w, Some(&self.conv_b), [2, 2], [0, 0], [1, 1], 1)
            }
        };
        let (_, c2, h2, w2) = frames.size4().expect("frames");
        let mut x = frames.view([b, t, c2, h2, w2]).permute([0, 2, 1, 3, 4]);
        if self.mode == ResampleMode::Down3d {
            x = self.time_downsample(&x, cache);
        }
        x
    }

    /// Doubles the frame count, except on the very first chunk (which holds the lone first frame).
    fn time_upsample(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let conv = self.time_conv.as_ref().expect("upsample3d has a time conv");
        let slot = cache.next();
        if matches!(slot, Slot::Empty) {
            *slot = Slot::Rep;
            return x.shallow_clone();
        }
        let (b, c, t, h, w) = x.size5().expect("video activations");
        let mut keep = frames_to_cache(x, slot);
        if matches!(slot, Slot::Rep) && keep.size()[2] < CACHE_T {
            keep = Tensor::cat(&[keep.zeros_like(), keep], 2);
        }
        let out = conv.forward(x, if let Slot::Frames(c) = slot { Some(c) } else { None });
        *slot = Slot::Frames(keep);
        let out = out.reshape([b, 2, c, t, h, w]);
        Tensor::stack(&[out.select(1, 0), out.select(1, 1)], 3).reshape([b, c, 2 * t, h, w])
    }

    /// Halves the frame count with a stride-2 conv over [last cached frame, chunk].
    fn time_downsample(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let conv = self.time_conv.as_ref().expect("downsample3d has a time conv");
        let slot = cache.next();
        let t = x.size()[2];
        match slot {
            Slot::Frames(prev) => {
                let pt = prev.size()[2];
                let input = Tensor::cat(&[prev.narrow(2, pt - 1, 1), x.shallow_clone()], 2);
                let out = conv.forward(&input, None);
                *slot = Slot::Frames(x.narrow(2, t - 1, 1).copy());
                out
            }
            _ => {
                *slot = Slot::Frames(x.copy());
                x.shallow_clone()
            }
        }
    }
}
