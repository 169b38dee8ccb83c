//! Convolutions where libtorch's own choice of kernel is slow.

use std::sync::OnceLock;

use tch::{Device, Kind, Tensor};

/// `conv3d` that takes oneDNN on the CPU for float32. libtorch's own choice sends a video VAE's 3-D
/// convolutions (batch 1, 3×3×3, small channel counts) to its im2col `slow_conv3d`, 2–6× slower
/// on a 2-core CPU than oneDNN at the default model's shapes (Wan's VAE; docs/benchmarks.md, CPU
/// section).
pub fn conv3d(x: &Tensor, weight: &Tensor, bias: &Tensor, stride: [i64; 3], padding: [i64; 3]) -> Tensor {
    if x.device() == Device::Cpu && x.kind() == Kind::Float && onednn_available() {
        x.contiguous().mkldnn_convolution(weight, Some(bias), padding, stride, [1, 1, 1], 1)
    } else {
        x.conv3d(weight, Some(bias), stride, padding, [1, 1, 1], 1)
    }
}

/// Whether this libtorch was built with oneDNN (the PyPI wheels are); probed once.
fn onednn_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let x = Tensor::ones([1, 1, 1, 1, 1], (Kind::Float, Device::Cpu));
        x.f_mkldnn_convolution(&x, None::<Tensor>, [0, 0, 0], [1, 1, 1], [1, 1, 1], 1).is_ok()
    })
}
