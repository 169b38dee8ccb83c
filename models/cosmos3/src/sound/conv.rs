//! The tokenizer's 1-D convolutions, as checkpoints store them: most are
//! `torch.nn.utils.weight_norm` wrappers (`weight_g`, `weight_v`, `w = g·v/‖v‖` with the norm over
//! every dim but 0), folded into a plain weight once at load since inference never changes g or v.
//! For a transposed convolution dim 0 of the weight is the *input* channel, so that is what the
//! norm runs per.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::Tensor;

/// A `Conv1d` or `ConvTranspose1d` with its weight ready to use.
pub struct Conv1d {
    weight: Tensor,
    bias: Option<Tensor>,
    stride: i64,
    padding: i64,
    dilation: i64,
    groups: i64,
    /// `Some(output_padding)` for a transposed convolution.
    transposed: Option<i64>,
}

/// Shape and hyper-parameters of one convolution (PyTorch's names and defaults).
#[derive(Clone, Copy)]
pub struct ConvSpec {
    /// Input channels.
    pub cin: i64,
    /// Output channels.
    pub cout: i64,
    /// Kernel size.
    pub k: i64,
    /// Stride.
    pub stride: i64,
    /// Zero padding on each side.
    pub padding: i64,
    /// Dilation.
    pub dilation: i64,
    /// Channel groups (depthwise: `cin`).
    pub groups: i64,
    /// Whether a `bias` is stored.
    pub bias: bool,
}

impl ConvSpec {
    /// A stride-1, undilated, ungrouped convolution with a bias.
    pub fn new(cin: i64, cout: i64, k: i64, padding: i64) -> Self {
        Self { cin, cout, k, stride: 1, padding, dilation: 1, groups: 1, bias: true }
    }
}

impl Conv1d {
    /// A plain convolution: `weight [cout, cin/groups, k]` (and `bias`) under `w`.
    pub fn plain(w: &Weights, s: ConvSpec) -> Result<Self> {
        let weight = w.get("weight", &[s.cout, s.cin / s.groups, s.k])?;
        Self::finish(w, s, weight, None)
    }

    /// A weight-norm convolution: `weight_g`, `weight_v [cout, cin, k]` (and `bias`) under `w`.
    pub fn weight_norm(w: &Weights, s: ConvSpec) -> Result<Self> {
        let weight = fold(w, [s.cout, s.cin / s.groups, s.k])?;
        Self::finish(w, s, weight, None)
    }

    /// A weight-norm transposed convolution: `weight_v [cin, cout, k]`, `weight_g [cin, 1, 1]`.
    pub fn weight_norm_transposed(w: &Weights, s: ConvSpec, output_padding: i64) -> Result<Self> {
        let weight = fold(w, [s.cin, s.cout / s.groups, s.k])?;
        Self::finish(w, s, weight, Some(output_padding))
    }

    fn finish(w: &Weights, s: ConvSpec, weight: Tensor, transposed: Option<i64>) -> Result<Self> {
        let bias = if s.bias { Some(w.get("bias", &[s.cout])?) } else { None };
        let ConvSpec { stride, padding, dilation, groups, .. } = s;
        Ok(Self { weight, bias, stride, padding, dilation, groups, transposed })
    }

    /// The convolution of `x [B, cin, T]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (s, p, d) = ([self.stride], [self.padding], [self.dilation]);
        match self.transposed {
            None => x.conv1d(&self.weight, self.bias.as_ref(), s, p, d, self.groups),
            Some(op) => x.conv_transpose1d(&self.weight, self.bias.as_ref(), s, p, [op], self.groups, d),
        }
    }
}

/// `g · v / ‖v‖` from `weight_g` and `weight_v` (of `shape`), computed in float32 (float64 for
/// a float64 model) and cast to the view's dtype, so a half-precision model gets the rounding of
/// one cast, not of the norm.
fn fold(w: &Weights, shape: [i64; 3]) -> Result<Tensor> {
    let f = w.with_kind(super::fold_kind(w.kind()));
    let v = f.get("weight_v", &shape)?;
    let g = f.get("weight_g", &[shape[0], 1, 1])?;
    let norm = v.norm_scalaropt_dim(2, [1, 2], true);
    Ok((v * (g / norm)).to_kind(w.kind()))
}
