//! The causal 3-D convolution: time padded only in front, fed the previous chunk's last frames
//! from the feature cache.

use anyhow::Result;
use tch::Tensor;

use super::cache::{frames_to_cache, FeatCache, Slot};
use crate::weights::Weights;

pub(super) struct CausalConv3d {
    weight: Tensor,
    bias: Tensor,
    stride: [i64; 3],
    /// Padding (time, height, width); time padding is applied causally (all in front, doubled).
    pad: [i64; 3],
}

impl CausalConv3d {
    pub(super) fn new(w: &Weights, cin: i64, cout: i64, k: [i64; 3], stride: [i64; 3], pad: [i64; 3]) -> Result<Self> {
        Ok(Self {
            weight: w.get("weight", &[cout, cin, k[0], k[1], k[2]])?,
            bias: w.get("bias", &[cout])?,
            stride,
            pad,
        })
    }
    pub(super) fn cube(w: &Weights, cin: i64, cout: i64) -> Result<Self> {
        Self::new(w, cin, cout, [3, 3, 3], [1, 1, 1], [1, 1, 1])
    }
    pub(super) fn pointwise(w: &Weights, cin: i64, cout: i64) -> Result<Self> {
        Self::new(w, cin, cout, [1, 1, 1], [1, 1, 1], [0, 0, 0])
    }

    pub(super) fn forward(&self, x: &Tensor, cache: Option<&Tensor>) -> Tensor {
        let mut time_pad = 2 * self.pad[0];
        let x = match cache {
            Some(c) if time_pad > 0 => {
                time_pad -= c.size()[2];
                Tensor::cat(&[c, x], 2)
            }
            _ => x.shallow_clone(),
        };
        // Zero frames in front for causality; the spatial zeros come from the conv's own padding.
        let x = if time_pad > 0 { x.constant_pad_nd([0, 0, 0, 0, time_pad, 0]) } else { x };
        let [_, ph, pw] = self.pad;
        fastvideo_layers::conv::conv3d(&x, &self.weight, &self.bias, self.stride, [0, ph, pw])
    }

    /// Forward through the feature cache: remember this input's tail for the next chunk.
    pub(super) fn cached(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let slot = cache.next();
        let keep = frames_to_cache(x, slot);
        let out = self.forward(x, if let Slot::Frames(c) = slot { Some(c) } else { None });
        *slot = Slot::Frames(keep);
        out
    }
}
