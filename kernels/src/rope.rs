//! RMSNorm of q and k across all heads (Wan's `rms_norm_across_heads`) fused with the 3-D rotary
//! embedding, which diffusers applies in fp32 from fp32 cos/sin tables on interleaved pairs.

use tch::{Kind, Tensor};

use crate::cuda::{self, Arg};

/// For each `(x, weight)`: `RMSNorm(x) * weight` over the last dim, then, with `rope = (cos, sin)`
/// (`[N, head_dim / 2]` fp32, one angle per interleaved pair of each head), the rotation of every
/// pair. `x` is `[B, N, D]` with a dense last dim (rows may be further apart, e.g. slices of a
/// fused QKV projection); the results are dense `[B, N, D]` in `x`'s dtype, computed in fp32.
/// Two inputs share one launch (q and k).
pub fn rms_norm_rope(
    inputs: &[(&Tensor, &Tensor)],
    eps: f64,
    head_dim: i64,
    rope: Option<(&Tensor, &Tensor)>,
) -> Vec<Tensor> {
    if let Some(out) = try_kernel(inputs, eps, head_dim, rope) {
        return out;
    }
    inputs.iter().map(|(x, w)| fallback(x, w, eps, head_dim, rope)).collect()
}

fn fallback(x: &Tensor, w: &Tensor, eps: f64, head_dim: i64, rope: Option<(&Tensor, &Tensor)>) -> Tensor {
    let kind = x.kind();
    let (b, n, d) = x.size3().expect("[B, N, D] activations");
    let y = x.to_kind(Kind::Float).rms_norm([d], Some(&w.to_kind(Kind::Float)), eps);
    let Some((cos, sin)) = rope else {
        return y.to_kind(kind);
    };
    let pairs = y.view([b, n, d / head_dim, head_dim / 2, 2]);
    let (x1, x2) = (pairs.select(-1, 0), pairs.select(-1, 1));
    let cos = cos.view([1, n, 1, head_dim / 2]);
    let sin = sin.view([1, n, 1, head_dim / 2]);
    let even = &x1 * &cos - &x2 * &sin;
    let odd = &x1 * &sin + &x2 * &cos;
    Tensor::stack(&[even, odd], -1).view([b, n, d]).to_kind(kind)
}

fn try_kernel(
    inputs: &[(&Tensor, &Tensor)],
    eps: f64,
    head_dim: i64,
    rope: Option<(&Tensor, &Tensor)>,
) -> Option<Vec<Tensor>> {
    // The kernel reads each chunk's four rotary pairs as one 16-byte load: whole chunks per head.
    let fits =
        |d: i64| cuda::row_fits(d) && head_dim % 2 == 0 && d % head_dim == 0 && (rope.is_none() || head_dim % 8 == 0);
    let call = Call { names: ["rms_rope_bf16", "rms_rope_f16", "rms_rope_f32"], eps, head_dim, tables: rope };
    launch(inputs, &call, fits, |_| head_dim / 2)
}

/// One launch of a norm-and-rotate kernel: its builds per dtype, and the rotary tables (none for
/// the norm alone).
struct Call<'a> {
    names: [&'static str; 3],
    eps: f64,
    head_dim: i64,
    tables: Option<(&'a Tensor, &'a Tensor)>,
}

/// Checks what both kernels need — one or two `(x, weight)` of one `[B, N, D]` layout (rows
/// `stride[1]` apart, 16-byte aligned), weights `[D]` of `x`'s dtype, fp32 tables `[N,
/// table_width(D)]` — and launches; `None` when anything does not fit (the caller falls back).
fn launch(
    inputs: &[(&Tensor, &Tensor)],
    call: &Call,
    fits: impl Fn(i64) -> bool,
    table_width: impl Fn(i64) -> i64,
) -> Option<Vec<Tensor>> {
    let first = inputs.first()?.0;
    if inputs.len() > 2 {
        return None;
    }
    let dev = cuda::for_tensor(first)?;
    let kind = first.kind();
    let name = match kind {
        Kind::BFloat16 => call.names[0],
        Kind::Half => call.names[1],
        Kind::Float => call.names[2],
        _ => return None,
    };
    let (b, n, d) = first.size3().ok()?;
    if !fits(d) {
        return None;
    }
    let row_stride = first.stride()[1];
    for (x, w) in inputs {
        let st = x.stride();
        let ok = x.size() == [b, n, d]
            && x.kind() == kind
            && x.device() == first.device()
            && st[2] == 1
            && st[1] == row_stride
            && st[0] == n * row_stride
            && row_stride % 8 == 0
            && cuda::aligned(x)
            && w.size() == [d]
            && w.kind() == kind
            && w.is_contiguous()
            && w.device() == first.device()
            && cuda::aligned(w);
        if !ok {
            return None;
        }
    }
    let (cos_ptr, sin_ptr) = match call.tables {
        Some((c, s)) => {
            let table = |t: &Tensor| {
                t.size() == [n, table_width(d)]
                    && t.kind() == Kind::Float
                    && t.is_contiguous()
                    && t.device() == first.device()
                    && cuda::aligned(t)
            };
            if !table(c) || !table(s) {
                return None;
            }
            (c.data_ptr() as u64, s.data_ptr() as u64)
        }
        None => (0, 0),
    };
    let outs: Vec<Tensor> = inputs.iter().map(|_| Tensor::empty([b, n, d], (kind, first.device()))).collect();
    let (x1, w1, o1) = match inputs.get(1) {
        Some((x, w)) => (x.data_ptr() as u64, w.data_ptr() as u64, outs[1].data_ptr() as u64),
        None => (0, 0, 0),
    };
    let args = [
        Arg::Ptr(inputs[0].0.data_ptr() as u64),
        Arg::Ptr(inputs[0].1.data_ptr() as u64),
        Arg::Ptr(outs[0].data_ptr() as u64),
        Arg::Ptr(x1),
        Arg::Ptr(w1),
        Arg::Ptr(o1),
        Arg::I64(row_stride),
        Arg::Ptr(cos_ptr),
        Arg::Ptr(sin_ptr),
        Arg::I32(n as i32),
        Arg::I32(d as i32),
        Arg::I32(call.head_dim as i32),
        Arg::F32(call.eps as f32),
    ];
    dev.launch_rows(name, b * n, inputs.len() as u32, d, &args).ok()?;
    Some(outs)
}

/// For each `(x, weight)`: `RMSNorm(x) * weight` over the last dim (all heads together), then the
/// rotate-half rotary embedding of every head with angles of its own: `cos`, `sin` are
/// `[N, D / 2]` fp32, head `h` taking columns `[h·head_dim/2, (h+1)·head_dim/2)` (LTX-2's
/// "split" layout, where the frequencies run across the whole width). Pairs are `(j, j +
/// head_dim/2)` within each head. `x` is `[B, N, D]` with a dense last dim; results are dense in
/// `x`'s dtype, computed in fp32. Two inputs share one launch (q and k of the same tokens).
pub fn rms_norm_rope_split(
    inputs: &[(&Tensor, &Tensor)],
    eps: f64,
    head_dim: i64,
    cos: &Tensor,
    sin: &Tensor,
) -> Vec<Tensor> {
    if let Some(out) = try_split_kernel(inputs, eps, head_dim, cos, sin) {
        return out;
    }
    inputs.iter().map(|(x, w)| split_fallback(x, w, eps, head_dim, cos, sin)).collect()
}

fn split_fallback(x: &Tensor, w: &Tensor, eps: f64, head_dim: i64, cos: &Tensor, sin: &Tensor) -> Tensor {
    let kind = x.kind();
    let (b, n, d) = x.size3().expect("[B, N, D] activations");
    let y = x.to_kind(Kind::Float).rms_norm([d], Some(&w.to_kind(Kind::Float)), eps);
    let heads = d / head_dim;
    let y = y.view([b, n, heads, 2, head_dim / 2]);
    let (x1, x2) = (y.select(3, 0), y.select(3, 1));
    let cos = cos.view([1, n, heads, head_dim / 2]);
    let sin = sin.view([1, n, heads, head_dim / 2]);
    let first = &x1 * &cos - &x2 * &sin;
    let second = &x2 * &cos + &x1 * &sin;
    Tensor::stack(&[first, second], 3).view([b, n, d]).to_kind(kind)
}

fn try_split_kernel(
    inputs: &[(&Tensor, &Tensor)],
    eps: f64,
    head_dim: i64,
    cos: &Tensor,
    sin: &Tensor,
) -> Option<Vec<Tensor>> {
    // One chunk of 8 per thread, every warp full (the partner half moves by shuffle), a head's
    // half a power-of-two number of chunks within one warp.
    let half_chunks = head_dim / 16;
    let fits = |d: i64| {
        d % 256 == 0
            && d <= 8192
            && head_dim >= 16
            && head_dim % 16 == 0
            && half_chunks <= 16
            && half_chunks & (half_chunks - 1) == 0
            && d % head_dim == 0
    };
    let call = Call {
        names: ["rms_rope_split_bf16", "rms_rope_split_f16", "rms_rope_split_f32"],
        eps,
        head_dim,
        tables: Some((cos, sin)),
    };
    launch(inputs, &call, fits, |d| d / 2)
}
