//! The Wan 2.2 VAE's residual down and up blocks (diffusers `WanResidualDownBlock` /
//! `WanResidualUpBlock`): the Wan 2.1 resnets and resampler of one level, plus a parameter-free
//! shortcut around them that rearranges space and time into channels (`AvgDown3D`: average
//! groups of channels) or back (`DupUp3D`: repeat channels). The shortcuts see only the current
//! chunk and keep no cache, as upstream.

use anyhow::Result;
use tch::{Kind, Tensor};

use super::cache::FeatCache;
use super::resample::{Resample, ResampleMode};
use super::residual::ResidualBlock;
use crate::weights::Weights;

/// `AvgDown3D`: `[B, cin, T, H, W]` → `[B, cout, T/ft, H/fs, W/fs]`. Short chunks are padded with
/// zero frames in front (the encoder's one-frame first chunk at a temporal level: its shortcut is
/// half the frame, as upstream computes it).
fn avg_down(x: &Tensor, cout: i64, ft: i64, fs: i64) -> Tensor {
    let (b, c, t, _, _) = x.size5().expect("video activations");
    let pad = (ft - t % ft) % ft;
    let x = if pad > 0 { x.constant_pad_nd([0, 0, 0, 0, pad, 0]) } else { x.shallow_clone() };
    let (_, _, t, h, w) = x.size5().expect("video activations");
    let group = c * ft * fs * fs / cout;
    x.view([b, c, t / ft, ft, h / fs, fs, w / fs, fs].as_slice())
        .permute([0, 1, 3, 5, 7, 2, 4, 6])
        .contiguous()
        .view([b, cout, group, t / ft, h / fs, w / fs])
        .mean_dim([2i64].as_slice(), false, None::<Kind>)
}

/// `DupUp3D`: `[B, cin, T, H, W]` → `[B, cout, T·ft, H·fs, W·fs]`, each input channel repeated;
/// on the decoder's first chunk the first `ft - 1` frames are dropped (the upsampler does not
/// double that chunk either).
fn dup_up(x: &Tensor, cout: i64, ft: i64, fs: i64, first_chunk: bool) -> Tensor {
    let (b, c, t, h, w) = x.size5().expect("video activations");
    let repeats = cout * ft * fs * fs / c;
    let x = x
        .repeat_interleave_self_int(repeats, 1, None)
        .view([b, cout, ft, fs, fs, t, h, w].as_slice())
        .permute([0, 1, 5, 2, 6, 3, 7, 4])
        .contiguous()
        .view([b, cout, t * ft, h * fs, w * fs]);
    if first_chunk && ft > 1 {
        x.narrow(2, ft - 1, t * ft - ft + 1)
    } else {
        x
    }
}

/// One encoder level: resnets, then the downsampler (all but the last level), plus the
/// `AvgDown3D` shortcut of the level's input.
pub(super) struct ResidualDownBlock {
    resnets: Vec<ResidualBlock>,
    down: Option<Resample>,
    cout: i64,
    ft: i64,
    fs: i64,
}

impl ResidualDownBlock {
    /// `temporal`: the level halves time too; `down`: it downsamples at all (not the last level).
    pub(super) fn new(w: &Weights, cin: i64, cout: i64, blocks: i64, temporal: bool, down: bool) -> Result<Self> {
        let resnets = (0..blocks)
            .map(|j| ResidualBlock::new(&w.pp("resnets").pp(j), if j == 0 { cin } else { cout }, cout))
            .collect::<Result<_>>()?;
        let mode = if temporal { ResampleMode::Down3d } else { ResampleMode::Down2d };
        let down_layer = if down { Some(Resample::new(&w.pp("downsampler"), cout, mode, None)?) } else { None };
        Ok(Self { resnets, down: down_layer, cout, ft: if temporal { 2 } else { 1 }, fs: if down { 2 } else { 1 } })
    }

    pub(super) fn forward(&self, x: &Tensor, cache: &mut FeatCache) -> Tensor {
        let mut h = x.shallow_clone();
        for r in &self.resnets {
            h = r.forward(&h, cache);
        }
        if let Some(d) = &self.down {
            h = d.forward(&h, cache);
        }
        h + avg_down(x, self.cout, self.ft, self.fs)
    }
}

/// One decoder level: resnets, then the upsampler (all but the last level, keeping the width),
/// plus the `DupUp3D` shortcut of the level's input.
pub(super) struct ResidualUpBlock {
    resnets: Vec<ResidualBlock>,
    up: Option<Resample>,
    cout: i64,
    ft: i64,
}

impl ResidualUpBlock {
    /// `temporal`: the level doubles time too; `up`: it upsamples at all (not the last level).
    pub(super) fn new(w: &Weights, cin: i64, cout: i64, blocks: i64, temporal: bool, up: bool) -> Result<Self> {
        let resnets = (0..=blocks)
            .map(|j| ResidualBlock::new(&w.pp("resnets").pp(j), if j == 0 { cin } else { cout }, cout))
            .collect::<Result<_>>()?;
        let mode = if temporal { ResampleMode::Up3d } else { ResampleMode::Up2d };
        let up_layer = if up { Some(Resample::new(&w.pp("upsampler"), cout, mode, Some(cout))?) } else { None };
        Ok(Self { resnets, up: up_layer, cout, ft: if temporal { 2 } else { 1 } })
    }

    pub(super) fn forward(&self, x: &Tensor, cache: &mut FeatCache, first_chunk: bool) -> Tensor {
        let mut h = x.shallow_clone();
        for r in &self.resnets {
            h = r.forward(&h, cache);
        }
        match &self.up {
            Some(u) => u.forward(&h, cache) + dup_up(x, self.cout, self.ft, 2, first_chunk),
            None => h,
        }
    }
}
