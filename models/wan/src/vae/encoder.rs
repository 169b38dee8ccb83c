//! The encoder's layers, as diffusers' `WanEncoder3d` lays them out (and names their weights):
//! Wan 2.1's flat list of resnets and resamplers, or Wan 2.2's residual block per level.

use anyhow::Result;

use super::attention::AttentionBlock;
use super::coder::{mid_block, Coder, Layer};
use super::config::VaeConfig;
use super::conv::CausalConv3d;
use super::resample::{Resample, ResampleMode};
use super::residual::{ResidualBlock, RmsNorm};
use super::residual_blocks::ResidualDownBlock;
use crate::weights::Weights;

pub(super) fn encoder(w: &Weights, cfg: &VaeConfig) -> Result<Coder> {
    let dims: Vec<i64> = std::iter::once(1).chain(cfg.dim_mult.iter().copied()).map(|m| cfg.base_dim * m).collect();
    let mut body = Vec::new();
    let mut scale = 1.0;
    let levels = cfg.dim_mult.len();
    // Wan 2.2: one residual block per level (no attention in them: `attn_scales` is unused).
    for i in (0..levels).filter(|_| cfg.is_residual) {
        let down = i != levels - 1;
        let temporal = down && cfg.temperal_downsample[i];
        let bw = w.pp("down_blocks").pp(i);
        body.push(Layer::ResDown(ResidualDownBlock::new(
            &bw,
            dims[i],
            dims[i + 1],
            cfg.num_res_blocks,
            temporal,
            down,
        )?));
    }
    for i in (0..levels).filter(|_| !cfg.is_residual) {
        let (mut cin, cout) = (dims[i], dims[i + 1]);
        for _ in 0..cfg.num_res_blocks {
            body.push(Layer::Res(ResidualBlock::new(&w.pp("down_blocks").pp(body.len()), cin, cout)?));
            if cfg.attn_scales.contains(&scale) {
                body.push(Layer::Attn(AttentionBlock::new(&w.pp("down_blocks").pp(body.len()), cout)?));
            }
            cin = cout;
        }
        if i != levels - 1 {
            let mode = if cfg.temperal_downsample[i] { ResampleMode::Down3d } else { ResampleMode::Down2d };
            body.push(Layer::Resample(Resample::new(&w.pp("down_blocks").pp(body.len()), cout, mode, None)?));
            scale /= 2.0;
        }
    }
    let top = dims[levels];
    body.extend(mid_block(&w.pp("mid_block"), top)?);
    Ok(Coder {
        conv_in: CausalConv3d::cube(&w.pp("conv_in"), cfg.in_channels, dims[0])?,
        body,
        norm_out: RmsNorm::new(&w.pp("norm_out"), top, 5)?,
        conv_out: CausalConv3d::cube(&w.pp("conv_out"), top, 2 * cfg.z_dim)?,
    })
}
