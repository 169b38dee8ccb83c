//! SwiGLU's product `silu(gate) · up` from one fused gate‖up projection, in one pass: the two
//! halves read once, the product written once (three passes and a temporary as tch ops).

use tch::{Kind, Tensor};

use crate::cuda::{self, Arg};

/// `silu(x[.., :inner]) · x[.., inner:]` of a dense `x [.., 2·inner]`, computed in fp32 and
/// rounded once; `None` where the kernel cannot take it (CPU, odd widths, kernels off): the
/// caller's ops compute the same function.
pub fn silu_mul(x: &Tensor) -> Option<Tensor> {
    let dev = cuda::for_tensor(x)?;
    let name = match x.kind() {
        Kind::BFloat16 => "silu_mul_bf16",
        Kind::Half => "silu_mul_f16",
        Kind::Float => "silu_mul_f32",
        _ => return None,
    };
    let size = x.size();
    let width = *size.last()?;
    let inner = width / 2;
    if width % 16 != 0 || !x.is_contiguous() || !cuda::aligned(x) || inner > i32::MAX as i64 {
        return None;
    }
    let rows = x.numel() as i64 / width;
    let mut out_size = size.clone();
    *out_size.last_mut()? = inner;
    let out = Tensor::empty(out_size.as_slice(), (x.kind(), x.device()));
    let threads = 256u32;
    let work = rows * (inner / 8);
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (((work + threads as i64 - 1) / threads as i64) as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    };
    let args = [Arg::Ptr(x.data_ptr() as u64), Arg::Ptr(out.data_ptr() as u64), Arg::I64(rows), Arg::I32(inner as i32)];
    dev.launch(name, cfg, &args).ok()?;
    Some(out)
}
