//! Joint attention: per-head RMS norms of queries and keys, the rotation of interleaved pairs
//! `(x[2i], x[2i+1])` by per-token tables, and scaled dot-product attention within each sample's
//! span of a packed sequence.

use anyhow::Result;
use fastvideo_torch::weights::Weights;
use tch::{Kind, Tensor};

/// `torch.nn.RMSNorm(head_dim)` over the last axis, computed in float32.
pub struct HeadNorm {
    weight: Tensor,
    eps: f64,
}

impl HeadNorm {
    /// The norm at `w` of width `dim`.
    pub fn new(w: &Weights, dim: i64, eps: f64) -> Result<Self> {
        Ok(Self { weight: w.get("weight", &[dim])?, eps })
    }

    /// `x [.., D]` normalised, in `x`'s dtype.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let rms = (xf.square().mean_dim(-1, true, Kind::Float) + self.eps).rsqrt();
        (xf * rms * self.weight.to_kind(Kind::Float)).to_kind(x.kind())
    }
}

/// The rotary tables of a joint sequence: `cos, sin` `[S, head_dim]` float32.
pub type RopeTables = (Tensor, Tensor);

/// `q, k, v [1, S, H, D]` (already normed, the joint sequence of a pack) rotated by `rope`
/// and attended within each sample's span (`spans`: start and length): `[1, S, H·D]`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, rope: &RopeTables, spans: &[(i64, i64)]) -> Tensor {
    let (b, s, h, d) = q.size4().expect("[B, S, H, D]");
    let q = rotate(q, &rope.0, &rope.1).transpose(1, 2);
    let k = rotate(k, &rope.0, &rope.1).transpose(1, 2);
    let v = v.transpose(1, 2);
    let sdpa = |q: &Tensor, k: &Tensor, v: &Tensor| {
        Tensor::scaled_dot_product_attention(q, k, v, None::<Tensor>, 0.0, false, None, false)
    };
    let o = match spans {
        [_] => sdpa(&q, &k, &v),
        _ => {
            let parts: Vec<Tensor> =
                spans.iter().map(|&(a, n)| sdpa(&q.narrow(2, a, n), &k.narrow(2, a, n), &v.narrow(2, a, n))).collect();
            Tensor::cat(&parts, 2)
        }
    };
    o.transpose(1, 2).reshape([b, s, h * d])
}

/// `x [B, S, H, D]` rotated by tables `[S, D]` (or `[B, S, D]`), in float32, answered in
/// `x`'s dtype.
pub fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let kind = x.kind();
    let xf = x.to_kind(Kind::Float);
    let size = xf.size();
    let pairs = xf.reshape([size[0], size[1], size[2], size[3] / 2, 2]);
    let (re, im) = (pairs.select(4, 0), pairs.select(4, 1));
    let rotated = Tensor::stack(&[im.neg(), re], 4).reshape(size.as_slice());
    let (cos, sin) = match cos.dim() {
        2 => (cos.unsqueeze(0).unsqueeze(2), sin.unsqueeze(0).unsqueeze(2)),
        _ => (cos.unsqueeze(2), sin.unsqueeze(2)),
    };
    (xf * cos + rotated * sin).to_kind(kind)
}
