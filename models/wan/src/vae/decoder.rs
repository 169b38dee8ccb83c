//! The decoder's layers, as diffusers' `WanDecoder3d` lays them out (and names their weights):
//! Wan 2.1's up blocks, or Wan 2.2's residual ones.

use anyhow::Result;

use super::coder::{mid_block, Coder, Layer};
use super::config::VaeConfig;
use super::conv::CausalConv3d;
use super::resample::{Resample, ResampleMode};
use super::residual::{ResidualBlock, RmsNorm};
use super::residual_blocks::ResidualUpBlock;
use crate::weights::Weights;

pub(super) fn decoder(w: &Weights, cfg: &VaeConfig) -> Result<Coder> {
    let base = cfg.decoder_base_dim.unwrap_or(cfg.base_dim);
    let last = *cfg.dim_mult.last().expect("validated non-empty");
    let dims: Vec<i64> = std::iter::once(last).chain(cfg.dim_mult.iter().rev().copied()).map(|m| base * m).collect();
    let upsample: Vec<bool> = cfg.temperal_downsample.iter().rev().copied().collect();
    let levels = cfg.dim_mult.len();
    let mut body = mid_block(&w.pp("mid_block"), dims[0])?;
    for i in 0..levels {
        let bw = w.pp("up_blocks").pp(i);
        if cfg.is_residual {
            // Wan 2.2: a residual block per level; its upsampler keeps the width.
            let up = i != levels - 1;
            let block = ResidualUpBlock::new(&bw, dims[i], dims[i + 1], cfg.num_res_blocks, up && upsample[i], up)?;
            body.push(Layer::ResUp(block));
            continue;
        }
        // Wan 2.1: every upsampler halves the channels, so later blocks start at half width.
        let (mut cin, cout) = (if i > 0 { dims[i] / 2 } else { dims[i] }, dims[i + 1]);
        for j in 0..=cfg.num_res_blocks {
            body.push(Layer::Res(ResidualBlock::new(&bw.pp("resnets").pp(j), cin, cout)?));
            cin = cout;
        }
        if i != levels - 1 {
            let mode = if upsample[i] { ResampleMode::Up3d } else { ResampleMode::Up2d };
            body.push(Layer::Resample(Resample::new(&bw.pp("upsamplers.0"), cout, mode, None)?));
        }
    }
    let out_dim = dims[levels];
    Ok(Coder {
        conv_in: CausalConv3d::cube(&w.pp("conv_in"), cfg.z_dim, dims[0])?,
        body,
        norm_out: RmsNorm::new(&w.pp("norm_out"), out_dim, 5)?,
        conv_out: CausalConv3d::cube(&w.pp("conv_out"), out_dim, cfg.out_channels)?,
    })
}
