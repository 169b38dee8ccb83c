//! The VAE's attention block: single-head self-attention over the pixels of each frame.

use anyhow::Result;
use tch::Tensor;

use super::residual::RmsNorm;
use crate::weights::Weights;

/// Single-head self-attention over the pixels of each frame.
pub(super) struct AttentionBlock {
    norm: RmsNorm,
    qkv_w: Tensor,
    qkv_b: Tensor,
    proj_w: Tensor,
    proj_b: Tensor,
}

impl AttentionBlock {
    pub(super) fn new(w: &Weights, dim: i64) -> Result<Self> {
        Ok(Self {
            norm: RmsNorm::new(&w.pp("norm"), dim, 4)?,
            qkv_w: w.get("to_qkv.weight", &[3 * dim, dim, 1, 1])?,
            qkv_b: w.get("to_qkv.bias", &[3 * dim])?,
            proj_w: w.get("proj.weight", &[dim, dim, 1, 1])?,
            proj_b: w.get("proj.bias", &[dim])?,
        })
    }
    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, t, h, w) = x.size5().expect("video activations");
        let f = x.permute([0, 2, 1, 3, 4]).reshape([b * t, c, h, w]);
        let qkv = self.norm.forward(&f).conv2d(&self.qkv_w, Some(&self.qkv_b), [1, 1], [0, 0], [1, 1], 1);
        let qkv = qkv.reshape([b * t, 1, 3 * c, h * w]).permute([0, 1, 3, 2]).contiguous();
        let parts = qkv.chunk(3, -1);
        let o = Tensor::scaled_dot_product_attention(
            &parts[0],
            &parts[1],
            &parts[2],
            None::<Tensor>,
            0.0,
            false,
            None,
            false,
        );
        let o = o.squeeze_dim(1).permute([0, 2, 1]).reshape([b * t, c, h, w]);
        let o = o.conv2d(&self.proj_w, Some(&self.proj_b), [1, 1], [0, 0], [1, 1], 1);
        o.view([b, t, c, h, w]).permute([0, 2, 1, 3, 4]) + x
    }
}
