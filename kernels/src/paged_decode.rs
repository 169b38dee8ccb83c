//! Paged decode attention (`kernels/cuda/paged_decode.cu`): one new query token per request over
//! its keys and values where they lie in a block pool, through its block table — no gather, one
//! launch per layer for the whole decode batch. [`attention`] answers `None` where the kernel
//! does not apply (not CUDA, another dtype or head size, more than 8 query heads per key head),
//! and the caller gathers the pages and runs SDPA instead, which computes the same function.

use cudarc::driver::LaunchConfig;
use tch::{Kind, Tensor};

use crate::cuda::{self, Arg};

/// Query heads one key/value head may serve (the kernel's registers hold them all).
pub const MAX_GROUPS: i64 = 8;

/// Attention of `q` (`[B, heads, D]` or `[B, heads, 1, D]`) over each request's first `lens[b]`
/// positions in the pools (`[blocks, kv_heads, block_size, D]` keys and values), addressed by
/// `table` (`[B, max_blocks]` int64 block ids); `[B, heads, D]`, or `None` to fall back.
pub fn attention(q: &Tensor, k_pool: &Tensor, v_pool: &Tensor, table: &Tensor, lens: &Tensor) -> Option<Tensor> {
    let kernels = cuda::for_tensor(q)?;
    let (b, heads, d) = match q.size().as_slice() {
        [b, h, d] => (*b, *h, *d),
        [b, h, 1, d] => (*b, *h, *d),
        _ => return None,
    };
    let s = k_pool.size();
    let [_, kv_heads, block_size, dk] = s.as_slice() else { return None };
    let name = match (q.kind(), d) {
        (Kind::BFloat16, 128) => "paged_decode_bf16_d128",
        (Kind::Half, 128) => "paged_decode_f16_d128",
        (Kind::BFloat16, 64) => "paged_decode_bf16_d64",
        (Kind::Half, 64) => "paged_decode_f16_d64",
        _ => return None,
    };
    let fits = *dk == d
        && heads % kv_heads == 0
        && heads / kv_heads <= MAX_GROUPS
        && k_pool.kind() == q.kind()
        && v_pool.kind() == q.kind()
        && v_pool.size() == s
        && table.kind() == Kind::Int64
        && lens.kind() == Kind::Int64
        && table.size().len() == 2
        && table.size()[0] == b
        && lens.size() == [b]
        && [q, k_pool, v_pool, table, lens]
            .iter()
            .all(|t| t.is_contiguous() && t.device() == q.device() && cuda::aligned(t));
    if !fits {
        return None;
    }
    let out = Tensor::empty([b, heads, d], (q.kind(), q.device()));
    let ptr = |t: &Tensor| Arg::Ptr(t.data_ptr() as u64);
    let scale = (d as f64).sqrt().recip() * std::f64::consts::LOG2_E;
    let args = [
        ptr(q),
        ptr(k_pool),
        ptr(v_pool),
        ptr(table),
        ptr(lens),
        ptr(&out),
        Arg::I32(heads as i32),
        Arg::I32(*kv_heads as i32),
        Arg::I32(*block_size as i32),
        Arg::I32(table.size()[1] as i32),
        Arg::F32(scale as f32),
    ];
    let cfg = LaunchConfig { grid_dim: (b as u32, *kv_heads as u32, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
    kernels.launch(name, cfg, &args).ok()?;
    Some(out)
}
