//! GGUF weights dequantized on their device (`cuda/ggml.cu`): a linear whose weight stays in
//! ggml's blocks gets its dense weight from here just before its GEMM, one layer at a time, so
//! device memory holds the blocks (Q8_0 is 1.06 bytes a value, Q4_K 0.56) and one layer's dense
//! copy. Elsewhere (a CPU, kernels off, a type or output the kernel does not take) the blocks
//! are decoded on the host by `fastvideo_gguf::dequantize`, which gives the same bits.

use fastvideo_gguf::GgmlType;
use tch::{Device, Kind, Tensor};

use crate::cuda::{self, Arg};

/// Threads per block of the decode kernels.
const THREADS: u32 = 256;

/// Writes the values `bytes` (1-D `uint8`, whole blocks of `ty`) hold into `out` (contiguous,
/// float32/bf16/f16, as many elements as the blocks hold values), on `out`'s device.
pub fn dequantize_into(bytes: &Tensor, ty: GgmlType, out: &Tensor) {
    let n = out.numel() as i64;
    debug_assert_eq!(ty.bytes_for(n as u64), Some(bytes.numel() as u64));
    if !ty.is_quantized() {
        let kind = match ty {
            GgmlType::F32 => Kind::Float,
            GgmlType::F16 => Kind::Half,
            _ => Kind::BFloat16,
        };
        let values = bytes.view_dtype(kind).reshape(out.size());
        out.shallow_clone().copy_(&values);
        return;
    }
    if try_kernel(bytes, ty, out).is_some() {
        return;
    }
    if out.device().is_cuda() {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!("GGUF blocks are decoded on the host (the CUDA decode kernel is unavailable): every forward copies the weights through host memory");
        });
    }
    let host: Vec<u8> = Vec::try_from(&bytes.to_device(Device::Cpu)).expect("a uint8 tensor");
    let mut values = vec![0f32; n as usize];
    fastvideo_gguf::dequantize(ty, &host, &mut values).expect("whole blocks (checked at load)");
    let values = Tensor::from_slice(&values).reshape(out.size());
    out.shallow_clone().copy_(&values);
}

fn try_kernel(bytes: &Tensor, ty: GgmlType, out: &Tensor) -> Option<()> {
    let k = cuda::for_tensor(out)?;
    if bytes.device() != out.device() || !out.is_contiguous() || !bytes.is_contiguous() || !cuda::aligned(out) {
        return None;
    }
    let suffix = match out.kind() {
        Kind::Float => "f32",
        Kind::BFloat16 => "bf16",
        Kind::Half => "f16",
        _ => return None,
    };
    let groups = out.numel() as i64 / 8;
    if groups == 0 {
        return Some(());
    }
    let name = format!("ggml_{}_{suffix}", ty.to_string().to_lowercase());
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: ((groups as u64).div_ceil(THREADS as u64) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let args = [Arg::Ptr(bytes.data_ptr() as u64), Arg::Ptr(out.data_ptr() as u64), Arg::I64(groups)];
    k.launch(&name, cfg, &args).ok()
}

/// The host decoder's result for `bytes` as a float32 tensor on the host: what the kernel is
/// checked against.
pub fn dequantize_on_host(bytes: &Tensor, ty: GgmlType, n: i64) -> Tensor {
    let out = Tensor::empty([n], (Kind::Float, Device::Cpu));
    dequantize_into(&bytes.to_device(Device::Cpu), ty, &out);
    out
}
