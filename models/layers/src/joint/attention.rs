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

    /// `x [.., D]` normalised, in `x`'s dtype: `torch.nn.RMSNorm`'s `rms_norm`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let d = *x.size().last().expect("rank >= 1");
        x.rms_norm([d], Some(&self.weight.to_kind(x.kind())), self.eps)
    }
}

/// The rotary tables of a pack, `cos, sin` `[S, head_dim]` float32 (each angle repeated for its
/// pair) of the joint sequence and of each stream alone (text tokens, image tokens: a double
/// block rotates each stream before joining them), and, where the fused norm-and-rotate kernel
/// runs, their half tables `[S·heads, head_dim / 2]` (one row per token and head).
pub struct RopeTables {
    /// The joint sequence (text then image of each sample).
    pub joint: (Tensor, Tensor),
    /// The text stream.
    pub text: (Tensor, Tensor),
    /// The image stream.
    pub image: (Tensor, Tensor),
    rows: Option<[(Tensor, Tensor); 3]>,
}

/// Which stream's tables.
#[derive(Clone, Copy)]
pub enum Stream {
    /// The joint sequence.
    Joint,
    /// The text tokens.
    Text,
    /// The image tokens.
    Image,
}

impl RopeTables {
    /// The tables of a pack laid out as `layout`, from the joint sequence's `(cos, sin)`, for
    /// attention of `heads` heads.
    pub fn new(joint: (Tensor, Tensor), layout: &super::Layout, heads: i64) -> Self {
        let split = |t: &Tensor| layout.split(&t.unsqueeze(0));
        let (tc, ic) = split(&joint.0);
        let (ts, is) = split(&joint.1);
        let (text, image) = ((tc.squeeze_dim(0), ts.squeeze_dim(0)), (ic.squeeze_dim(0), is.squeeze_dim(0)));
        let fused = joint.0.device().is_cuda() && fastvideo_kernels::enabled();
        let rows =
            fused.then(|| [&joint, &text, &image].map(|(c, s)| (per_head_half(c, heads), per_head_half(s, heads))));
        Self { joint, text, image, rows }
    }

    fn pick(&self, stream: Stream) -> (&(Tensor, Tensor), Option<&(Tensor, Tensor)>) {
        let i = stream as usize;
        let full = [&self.joint, &self.text, &self.image][i];
        (full, self.rows.as_ref().map(|r| &r[i]))
    }
}

/// `[S, head_dim]` pair-repeated table → `[S·heads, head_dim / 2]` (one angle per pair, each
/// token's row repeated for its heads), contiguous float32.
fn per_head_half(t: &Tensor, heads: i64) -> Tensor {
    let (s, d) = t.size2().expect("[S, head_dim]");
    let half = t.view([s, d / 2, 2]).select(2, 0);
    half.unsqueeze(1).expand([s, heads, d / 2], false).reshape([s * heads, d / 2]).contiguous()
}

/// Per-head RMS norms of `q` and `k` `[B, S, H, D]` (`norms`) and the rotation of the stream's
/// tokens by `rope`: one fused kernel on the GPU (the norm and the rotation in float32, rounded
/// once), the ops elsewhere.
pub fn norm_rope(
    q: &Tensor,
    k: &Tensor,
    norms: (&HeadNorm, &HeadNorm),
    rope: &RopeTables,
    stream: Stream,
) -> (Tensor, Tensor) {
    let (full, rows) = rope.pick(stream);
    if let Some((cos, sin)) = rows {
        let (b, s, h, d) = q.size4().expect("[B, S, H, D]");
        let flat = |t: &Tensor| t.contiguous().view([b, s * h, d]);
        let (qf, kf) = (flat(q), flat(k));
        let out = fastvideo_kernels::rms_norm_rope(
            &[(&qf, &norms.0.weight), (&kf, &norms.1.weight)],
            norms.0.eps,
            d,
            Some((cos, sin)),
        );
        return (out[0].view([b, s, h, d]), out[1].view([b, s, h, d]));
    }
    let q = rotate(&norms.0.forward(q), &full.0, &full.1);
    let k = rotate(&norms.1.forward(k), &full.0, &full.1);
    (q, k)
}

/// `q, k, v [1, S, H, D]` (normed and rotated: [`norm_rope`]) of a pack's joint sequence,
/// attended within each sample's span (`spans`: start and length): `[1, S, H·D]`.
pub fn attend(q: &Tensor, k: &Tensor, v: &Tensor, spans: &[(i64, i64)]) -> Tensor {
    let (b, s, h, d) = q.size4().expect("[B, S, H, D]");
    let (q, k, v) = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
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
