//! The pieces of diffusers' 2-D `Encoder`/`Decoder`: 2-D convolutions, `ResnetBlock2D`, the
//! mid-block's single-head attention, and the down/up samplers. Group norms use eps 1e-6.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

const EPS: f64 = 1e-6;

/// `nn.Conv2d` with a bias.
pub struct Conv2d {
    weight: Tensor,
    bias: Tensor,
    stride: i64,
    padding: i64,
}

impl Conv2d {
    /// The convolution at `w`, `k`×`k`, `cin` → `cout`.
    pub fn new(w: &Weights, cin: i64, cout: i64, k: i64, stride: i64, padding: i64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[cout, cin, k, k])?, bias: w.get("bias", &[cout])?, stride, padding })
    }

    /// `x [B, C, H, W]` convolved.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.conv2d(&self.weight, Some(&self.bias), [self.stride], [self.padding], [1], 1)
    }
}

/// `nn.GroupNorm` with affine weights.
pub struct GroupNorm {
    groups: i64,
    weight: Tensor,
    bias: Tensor,
}

impl GroupNorm {
    /// The norm at `w` over `channels` in `groups`.
    pub fn new(w: &Weights, groups: i64, channels: i64) -> Result<Self> {
        Ok(Self { groups, weight: w.get("weight", &[channels])?, bias: w.get("bias", &[channels])? })
    }

    /// `x [B, C, ..]` normalised.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.group_norm(self.groups, Some(&self.weight), Some(&self.bias), EPS, false)
    }
}

/// `ResnetBlock2D` without a time embedding: two norm-silu-conv steps and a 1×1 shortcut
/// when the width changes.
pub struct Resnet {
    norm1: GroupNorm,
    conv1: Conv2d,
    norm2: GroupNorm,
    conv2: Conv2d,
    shortcut: Option<Conv2d>,
}

impl Resnet {
    /// The block at `w`, `cin` → `cout`.
    pub fn new(w: &Weights, groups: i64, cin: i64, cout: i64) -> Result<Self> {
        Ok(Self {
            norm1: GroupNorm::new(&w.pp("norm1"), groups, cin)?,
            conv1: Conv2d::new(&w.pp("conv1"), cin, cout, 3, 1, 1)?,
            norm2: GroupNorm::new(&w.pp("norm2"), groups, cout)?,
            conv2: Conv2d::new(&w.pp("conv2"), cout, cout, 3, 1, 1)?,
            shortcut: match cin != cout {
                true => Some(Conv2d::new(&w.pp("conv_shortcut"), cin, cout, 1, 1, 0)?),
                false => None,
            },
        })
    }

    /// `x` through the block.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.conv1.forward(&self.norm1.forward(x).silu());
        let h = self.conv2.forward(&self.norm2.forward(&h).silu());
        match &self.shortcut {
            Some(s) => s.forward(x) + h,
            None => x + h,
        }
    }
}

/// The mid-block's attention: group norm, one head over all pixels, a residual.
pub struct Attention {
    norm: GroupNorm,
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
    v: (Tensor, Tensor),
    out: (Tensor, Tensor),
}

impl Attention {
    /// The attention at `w` of width `c`.
    pub fn new(w: &Weights, groups: i64, c: i64) -> Result<Self> {
        let lin = |name: &str| -> Result<(Tensor, Tensor)> {
            let l = w.pp(name);
            Ok((l.get("weight", &[c, c])?, l.get("bias", &[c])?))
        };
        Ok(Self {
            norm: GroupNorm::new(&w.pp("group_norm"), groups, c)?,
            q: lin("to_q")?,
            k: lin("to_k")?,
            v: lin("to_v")?,
            out: lin("to_out.0")?,
        })
    }

    /// `x [B, C, H, W]` through it.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (b, c, h, w) = x.size4().expect("[B, C, H, W]");
        let s = self.norm.forward(x).view([b, c, h * w]).transpose(1, 2);
        let proj = |p: &(Tensor, Tensor)| s.linear(&p.0, Some(&p.1)).unsqueeze(1);
        let o = Tensor::scaled_dot_product_attention(
            &proj(&self.q),
            &proj(&self.k),
            &proj(&self.v),
            None::<Tensor>,
            0.0,
            false,
            None,
            false,
        );
        let o = o.squeeze_dim(1).linear(&self.out.0, Some(&self.out.1));
        o.transpose(1, 2).reshape([b, c, h, w]) + x
    }
}

/// `Downsample2D` with a convolution: pad right and bottom by one, 3×3 stride 2.
pub struct Downsample(Conv2d);

impl Downsample {
    /// The sampler at `w` (`downsamplers.0`).
    pub fn new(w: &Weights, c: i64) -> Result<Self> {
        Ok(Self(Conv2d::new(&w.pp("conv"), c, c, 3, 2, 0)?))
    }

    /// `x` at half the size.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.0.forward(&x.constant_pad_nd([0, 1, 0, 1]))
    }
}

/// `Upsample2D` with a convolution: nearest ×2, then 3×3.
pub struct Upsample(Conv2d);

impl Upsample {
    /// The sampler at `w` (`upsamplers.0`).
    pub fn new(w: &Weights, c: i64) -> Result<Self> {
        Ok(Self(Conv2d::new(&w.pp("conv"), c, c, 3, 1, 1)?))
    }

    /// `x` at twice the size.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (_, _, h, w) = x.size4().expect("[B, C, H, W]");
        self.0.forward(&x.upsample_nearest2d([2 * h, 2 * w], None, None))
    }
}

/// `UNetMidBlock2D` as the autoencoder runs it: resnet, attention (when configured), resnet.
pub struct MidBlock {
    first: Resnet,
    attention: Option<Attention>,
    second: Resnet,
}

impl MidBlock {
    /// The block at `w` of width `c`.
    pub fn new(w: &Weights, groups: i64, c: i64, attention: bool) -> Result<Self> {
        Ok(Self {
            first: Resnet::new(&w.pp("resnets.0"), groups, c, c)?,
            attention: match attention {
                true => Some(Attention::new(&w.pp("attentions.0"), groups, c)?),
                false => None,
            },
            second: Resnet::new(&w.pp("resnets.1"), groups, c, c)?,
        })
    }

    /// `x` through it.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let mut h = self.first.forward(x);
        if let Some(a) = &self.attention {
            h = a.forward(&h);
        }
        self.second.forward(&h)
    }
}
