//! Per-head RMSNorm · weight fused with the rotate-half rotary embedding (Qwen3's and Cosmos3's
//! q/k path: `norm_q`/`norm_k` over each head's 128 channels, then `x·cos + rotate_half(x)·sin`),
//! q and k heads read in place from a fused projection and written as one dense tensor. Six to
//! eleven elementwise passes over q and k become one read and one write.

use tch::{Device, Kind, Tensor};

use crate::cuda::{self, Arg};

/// Channels per head the kernel handles (sixteen threads of eight values).
pub const HEAD_DIM: i64 = 128;

/// `qk [B, L, H, 128]` (heads dense, rows `stride[1]` apart: a slice of a fused projection),
/// the first `q_heads` heads normalised with `wq`, the rest with `wk` (`[128]`, `qk`'s dtype),
/// then rotated by fp32 tables `cos`, `sin` `[B·L, 64]` (one angle per frequency, unsigned):
/// dense `[B, L, H, 128]` in `qk`'s dtype, computed in fp32 and rounded once. `None` when the
/// kernel cannot take the inputs (CPU tensors, another head size, kernels off): the caller's
/// own ops compute the same function.
pub fn head_rms_rope(
    qk: &Tensor,
    wq: &Tensor,
    wk: &Tensor,
    q_heads: i64,
    eps: f64,
    cos: &Tensor,
    sin: &Tensor,
) -> Option<Tensor> {
    let dev = cuda::for_tensor(qk)?;
    let kind = qk.kind();
    let name = match kind {
        Kind::BFloat16 => "head_rms_rope_bf16",
        Kind::Half => "head_rms_rope_f16",
        Kind::Float => "head_rms_rope_f32",
        _ => return None,
    };
    let (b, l, h, d) = qk.size4().ok()?;
    let st = qk.stride();
    let row = st[1];
    // An even head count fills whole warps (two heads each): the shuffles ask all 32 lanes.
    let fits = d == HEAD_DIM
        && (1..=64).contains(&h)
        && h % 2 == 0
        && (0..=h).contains(&q_heads)
        && st[3] == 1
        && st[2] == HEAD_DIM
        && st[0] == l * row
        && row % 8 == 0
        && cuda::aligned(qk);
    let weight = |w: &Tensor| {
        w.size() == [HEAD_DIM] && w.kind() == kind && w.is_contiguous() && w.device() == qk.device() && cuda::aligned(w)
    };
    let table = |t: &Tensor| {
        t.size() == [b * l, HEAD_DIM / 2]
            && t.kind() == Kind::Float
            && t.is_contiguous()
            && t.device() == qk.device()
            && cuda::aligned(t)
    };
    if !fits || !weight(wq) || !weight(wk) || !table(cos) || !table(sin) {
        return None;
    }
    let out = Tensor::empty([b, l, h, HEAD_DIM], (kind, qk.device()));
    let args = [
        Arg::Ptr(qk.data_ptr() as u64),
        Arg::I64(row),
        Arg::Ptr(wq.data_ptr() as u64),
        Arg::Ptr(wk.data_ptr() as u64),
        Arg::I32(q_heads as i32),
        Arg::Ptr(out.data_ptr() as u64),
        Arg::Ptr(cos.data_ptr() as u64),
        Arg::Ptr(sin.data_ptr() as u64),
        Arg::F32(eps as f32),
    ];
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: ((b * l) as u32, 1, 1),
        block_dim: ((h * 16) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    dev.launch(name, cfg, &args).ok()?;
    Some(out)
}

/// Whether [`head_rms_rope`] can run on `device` at all (CUDA, kernels on): callers skip building
/// its fp32 tables otherwise.
pub fn available(device: Device) -> bool {
    matches!(device, Device::Cuda(_)) && crate::enabled()
}
