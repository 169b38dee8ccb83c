//! Qwen2.5-VL's vision tower: pictures as 14-pixel patches (two frames deep), a ViT whose
//! blocks attend within windows of 112 pixels (a few attend over the whole picture), 2-D
//! rotary positions, and the merger that folds each 2×2 group of patches into one language
//! token. Pictures go in as the processor lays them out ([`processor`]).

pub mod processor;

use std::path::Path;

use anyhow::{bail, Context, Result};
use fastvideo_layers::Linear;
use fastvideo_torch::weights::Weights;
use serde::Deserialize;
use tch::{Kind, Tensor};

use crate::rms_norm::RmsNorm;

/// `vision_config` of a Qwen2.5-VL `config.json`.
#[derive(Clone, Debug, Deserialize)]
#[allow(missing_docs)]
pub struct VisionConfig {
    pub depth: usize,
    pub hidden_size: i64,
    pub intermediate_size: i64,
    pub num_heads: i64,
    pub out_hidden_size: i64,
    #[serde(default = "defaults::patch")]
    pub patch_size: i64,
    #[serde(default = "defaults::two")]
    pub spatial_merge_size: i64,
    #[serde(default = "defaults::two")]
    pub temporal_patch_size: i64,
    #[serde(default = "defaults::window")]
    pub window_size: i64,
    #[serde(default)]
    pub fullatt_block_indexes: Vec<usize>,
    #[serde(default = "defaults::three")]
    pub in_channels: i64,
    #[serde(default = "defaults::silu")]
    pub hidden_act: String,
}

mod defaults {
    pub fn patch() -> i64 {
        14
    }
    pub fn two() -> i64 {
        2
    }
    pub fn three() -> i64 {
        3
    }
    pub fn window() -> i64 {
        112
    }
    pub fn silu() -> String {
        "silu".into()
    }
}

impl VisionConfig {
    /// The `vision_config` of a Qwen2.5-VL `config.json` at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        let vision = v.get("vision_config").with_context(|| format!("{}: no `vision_config`", path.display()))?;
        let c: Self =
            serde_json::from_value(vision.clone()).with_context(|| format!("{}: vision_config", path.display()))?;
        if c.hidden_act != "silu" {
            bail!("{}: vision_config.hidden_act `{}` is not served (silu)", path.display(), c.hidden_act);
        }
        Ok(c)
    }

    fn head_dim(&self) -> i64 {
        self.hidden_size / self.num_heads
    }
}

/// One ViT block: RMS-normed attention with 2-D rope, RMS-normed SwiGLU.
struct Block {
    norm1: RmsNorm,
    qkv: Linear,
    proj: Linear,
    norm2: RmsNorm,
    gate_up: Linear,
    down: Linear,
    heads: i64,
}

impl Block {
    fn new(w: &Weights, c: &VisionConfig) -> Result<Self> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let m = w.pp("mlp");
        Ok(Self {
            norm1: RmsNorm::new(&w.pp("norm1"), h, 1e-6)?,
            qkv: Linear::new(&w.pp("attn.qkv"), h, 3 * h, true)?,
            proj: Linear::new(&w.pp("attn.proj"), h, h, true)?,
            norm2: RmsNorm::new(&w.pp("norm2"), h, 1e-6)?,
            gate_up: Linear::concat(vec![
                Linear::new(&m.pp("gate_proj"), h, i, true)?,
                Linear::new(&m.pp("up_proj"), h, i, true)?,
            ]),
            down: Linear::new(&m.pp("down_proj"), i, h, true)?,
            heads: c.num_heads,
        })
    }

    /// `x [N, C]` (window order) through the block; attention within each span of `spans`.
    fn forward(&self, x: &Tensor, rope: (&Tensor, &Tensor), spans: &[(i64, i64)]) -> Tensor {
        let (n, c) = x.size2().expect("[N, C]");
        let d = c / self.heads;
        let qkv = self.qkv.forward(&self.norm1.forward(x)).view([n, 3, self.heads, d]);
        // Rotate in float32, as the reference: [1, heads, N, d].
        let rot = |t: Tensor| {
            let t = t.transpose(0, 1).unsqueeze(0).to_kind(Kind::Float);
            crate::rope::Rope::apply(&t, rope.0, rope.1).to_kind(x.kind())
        };
        let q = rot(qkv.select(1, 0));
        let k = rot(qkv.select(1, 1));
        let v = qkv.select(1, 2).transpose(0, 1).unsqueeze(0);
        let parts: Vec<Tensor> = spans
            .iter()
            .map(|&(a, len)| {
                Tensor::scaled_dot_product_attention(
                    &q.narrow(2, a, len),
                    &k.narrow(2, a, len),
                    &v.narrow(2, a, len),
                    None::<Tensor>,
                    0.0,
                    false,
                    None,
                    false,
                )
            })
            .collect();
        let o = Tensor::cat(&parts, 2).squeeze_dim(0).transpose(0, 1).reshape([n, c]);
        let x = x + self.proj.forward(&o);
        let gu = self.gate_up.forward(&self.norm2.forward(&x));
        let half = gu.size()[1] / 2;
        &x + self.down.forward(&(gu.narrow(1, 0, half).silu() * gu.narrow(1, half, half)))
    }
}

/// The vision tower.
pub struct VisionTower {
    config: VisionConfig,
    patch_embed: Tensor,
    blocks: Vec<Block>,
    ln_q: RmsNorm,
    mlp_0: Linear,
    mlp_2: Linear,
    /// `[head_dim / 4]` float32: the 2-D rope's frequencies (one set for rows, one for columns).
    inv_freq: Tensor,
}

// SAFETY: read-only weights after loading; libtorch's tensor reads are thread-safe.
unsafe impl Sync for VisionTower {}

/// A picture's patch grid `(rows, columns)` (a single frame deep).
pub type Grid = (i64, i64);

impl VisionTower {
    /// The tower at `w` (`visual`).
    pub fn new(config: VisionConfig, w: &Weights) -> Result<Self> {
        let c = &config;
        let (h, ps, tps) = (c.hidden_size, c.patch_size, c.temporal_patch_size);
        let merged = h * c.spatial_merge_size * c.spatial_merge_size;
        let patch_embed = w.get("patch_embed.proj.weight", &[h, c.in_channels, tps, ps, ps])?.reshape([h, -1]);
        let quarter = c.head_dim() / 2;
        let exps =
            Tensor::arange_start_step(0, quarter, 2, (Kind::Int64, w.device())).to_kind(Kind::Float) / quarter as f64;
        let powers = Tensor::scalar_tensor(10000.0, (Kind::Float, w.device())).pow(&exps);
        Ok(Self {
            blocks: (0..c.depth).map(|i| Block::new(&w.pp(format!("blocks.{i}")), c)).collect::<Result<_>>()?,
            ln_q: RmsNorm::new(&w.pp("merger.ln_q"), h, 1e-6)?,
            mlp_0: Linear::new(&w.pp("merger.mlp.0"), merged, merged, true)?,
            mlp_2: Linear::new(&w.pp("merger.mlp.2"), merged, c.out_hidden_size, true)?,
            inv_freq: powers.ones_like() / powers,
            patch_embed,
            config,
        })
    }

    /// Its config.
    pub fn config(&self) -> &VisionConfig {
        &self.config
    }

    /// Patch positions `(row, column)` of a grid in the processor's order (2×2 merge groups
    /// one after another).
    fn positions(&self, (gh, gw): Grid) -> Vec<(i64, i64)> {
        let m = self.config.spatial_merge_size;
        let mut out = Vec::with_capacity((gh * gw) as usize);
        for by in 0..gh / m {
            for bx in 0..gw / m {
                for y in 0..m {
                    for x in 0..m {
                        out.push((by * m + y, bx * m + x));
                    }
                }
            }
        }
        out
    }

    /// The merge groups of all `grids` in window order, and the windows' spans in patches.
    fn windows(&self, grids: &[Grid]) -> (Vec<i64>, Vec<(i64, i64)>) {
        let c = &self.config;
        let m = c.spatial_merge_size;
        let unit = m * m;
        let win = c.window_size / m / c.patch_size;
        let (mut order, mut spans) = (Vec::new(), Vec::new());
        let (mut base, mut start) = (0, 0);
        for &(gh, gw) in grids {
            let (lh, lw) = (gh / m, gw / m);
            for wy in 0..(lh + win - 1) / win {
                for wx in 0..(lw + win - 1) / win {
                    let mut count = 0;
                    for y in wy * win..((wy + 1) * win).min(lh) {
                        for x in wx * win..((wx + 1) * win).min(lw) {
                            order.push(base + y * lw + x);
                            count += 1;
                        }
                    }
                    if count > 0 {
                        spans.push((start, count * unit));
                        start += count * unit;
                    }
                }
            }
            base += lh * lw;
        }
        (order, spans)
    }

    /// Language tokens `[Σ patches / 4, out_hidden]` of pictures `patches [Σ patches, C·2·14·14]`
    /// (as [`processor::patchify`] lays them out) with patch grids `grids`.
    pub fn forward(&self, patches: &Tensor, grids: &[Grid]) -> Tensor {
        let c = &self.config;
        let device = patches.device();
        let kind = self.patch_embed.kind();
        let m = c.spatial_merge_size;
        let unit = m * m;
        let x = patches.to_kind(kind).matmul(&self.patch_embed.tr());
        let n = x.size()[0];
        // 2-D rope angles of every patch: rows' then columns' frequencies.
        let pos: Vec<i64> = grids.iter().flat_map(|g| self.positions(*g)).flat_map(|(y, x)| [y, x]).collect();
        let pos = Tensor::from_slice(&pos).to_device(device).view([n, 2]).to_kind(Kind::Float);
        let ang = Tensor::cat(
            &[
                pos.select(1, 0).unsqueeze(1) * self.inv_freq.unsqueeze(0),
                pos.select(1, 1).unsqueeze(1) * self.inv_freq.unsqueeze(0),
            ],
            1,
        );
        // Window order: merge groups permuted, patches inside a group kept together.
        let (order, window_spans) = self.windows(grids);
        let groups = Tensor::from_slice(&order).to_device(device);
        let idx = (groups.unsqueeze(1) * unit + Tensor::arange(unit, (Kind::Int64, device)).unsqueeze(0)).reshape([-1]);
        let x = x.index_select(0, &idx);
        let ang = ang.index_select(0, &idx);
        let (cos, sin) = (ang.cos(), ang.sin());
        let cos = Tensor::cat(&[&cos, &cos], -1);
        let sin = Tensor::cat(&[&sin.neg(), &sin], -1);
        let mut full = Vec::new();
        let mut at = 0;
        for &(gh, gw) in grids {
            full.push((at, gh * gw));
            at += gh * gw;
        }
        let mut h = x;
        for (i, block) in self.blocks.iter().enumerate() {
            let spans = if c.fullatt_block_indexes.contains(&i) { &full } else { &window_spans };
            h = block.forward(&h, (&cos, &sin), spans);
        }
        let merged = self.ln_q.forward(&h).view([-1, c.hidden_size * unit]);
        let out = self.mlp_2.forward(&self.mlp_0.forward(&merged).gelu("none"));
        // Back to the processor's order.
        out.index_select(0, &groups.argsort(0, false))
    }
}
