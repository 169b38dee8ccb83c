//! The few layers the Wan family needs, as plain structs holding checkpoint tensors.

use std::sync::OnceLock;

use anyhow::Result;
use fastvideo_kernels::fp8::Quantized;
use fastvideo_pipeline::AdapterRows;
use tch::{Device, Kind, Tensor};

use crate::weights::Weights;

/// Which adapter rows a forward runs with (`None`: none, at no cost).
pub type Lora<'a> = Option<&'a AdapterRows<'a>>;

/// `nn.Linear` (`weight` is `[out, in]`).
pub struct Linear {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
    /// The checkpoint modules this linear computes: one, or several fused (their outputs
    /// concatenated), each with the module slot adapters address it by.
    parts: Vec<LinearPart>,
    /// Set when `weight` holds FP8 (e4m3) values (`--fp8-linears`): one float32 scale per
    /// output channel.
    fp8_scale: Option<Tensor>,
}

/// One checkpoint module inside a [`Linear`]: output rows `start..start + len`.
#[derive(Clone, Copy, Debug)]
pub struct LinearPart {
    pub slot: usize,
    pub start: i64,
    pub len: i64,
}

impl Linear {
    /// The module at `w`'s path, registered in the checkpoint's module table (so adapters can
    /// name it).
    pub fn new(w: &Weights, in_dim: i64, out_dim: i64, bias: bool) -> Result<Self> {
        let weight = w.get_linear_weight(&[out_dim, in_dim])?;
        let bias = if bias { Some(w.get("bias", &[out_dim])?) } else { None };
        let slot = w.register_linear(in_dim, out_dim, bias.is_some());
        Ok(Self { weight, bias, parts: vec![LinearPart { slot, start: 0, len: out_dim }], fp8_scale: None })
    }

    /// Several projections of the same input as one (outputs concatenated in order), so they
    /// run as one GEMM. All parts must agree on having a bias.
    pub fn concat(parts: &[Linear]) -> Self {
        let weight = Tensor::cat(&parts.iter().map(|p| &p.weight).collect::<Vec<_>>(), 0);
        let bias = parts.iter().map(|p| p.bias.as_ref()).collect::<Option<Vec<_>>>().map(|b| Tensor::cat(&b, 0));
        let mut offset = 0;
        let mut fused = Vec::new();
        for p in parts {
            for q in &p.parts {
                fused.push(LinearPart { start: offset + q.start, ..*q });
            }
            // From the parts, not the weight: a deferred weight (lazy loading) is empty.
            offset += p.parts.iter().map(|q| q.len).sum::<i64>();
        }
        Self { weight, bias, parts: fused, fp8_scale: None }
    }

    /// The modules this linear computes.
    pub fn parts(&self) -> &[LinearPart] {
        &self.parts
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        match &self.fp8_scale {
            Some(scale) => fastvideo_kernels::fp8::linear(x, &self.weight, scale, self.bias.as_ref()),
            None => x.linear(&self.weight, self.bias.as_ref()),
        }
    }

    /// [`forward_lora`](Self::forward_lora) with the input's FP8 quantization `q` computed once
    /// for several linears reading `x` (attention's projections); `q` is ignored by a linear
    /// not in FP8.
    pub fn forward_shared(&self, x: &Tensor, q: Option<&Quantized>, lora: Lora) -> Tensor {
        let (Some(scale), Some(q)) = (&self.fp8_scale, q) else { return self.forward_lora(x, lora) };
        let y = fastvideo_kernels::fp8::linear_quantized(q, &self.weight, scale, self.bias.as_ref());
        if let Some(rows) = lora {
            crate::adapters::add_deltas(self, x, &y, rows);
        }
        y
    }

    /// The output for activations already quantized (an FP8 linear whose input was quantized
    /// by a fused kernel, e.g. with the FFN's GELU); `None` when this linear is not FP8.
    pub fn forward_quantized(&self, q: &Quantized) -> Option<Tensor> {
        let scale = self.fp8_scale.as_ref()?;
        Some(fastvideo_kernels::fp8::linear_quantized(q, &self.weight, scale, self.bias.as_ref()))
    }

    /// Stores the weight in FP8 with per-output-channel scales; forwards then quantize their
    /// input per token (`fastvideo_kernels::fp8`). For `--fp8-linears`, at load, before the
    /// model is shared.
    pub fn quantize_fp8(&mut self) {
        if self.fp8_scale.is_none() {
            let (values, scale) = fastvideo_kernels::fp8::quantize_weight(&self.weight);
            self.weight = values;
            self.fp8_scale = Some(scale);
        }
    }

    /// Whether the weight is stored in FP8 (then adapters run unmerged only).
    pub fn is_fp8(&self) -> bool {
        self.fp8_scale.is_some()
    }

    /// [`forward`](Self::forward) plus each row group's adapter deltas (unmerged LoRA:
    /// `y += s · scale · up(down(x))` per adapter, rows gathered per set).
    pub fn forward_lora(&self, x: &Tensor, lora: Lora) -> Tensor {
        let Some(rows) = lora else { return self.forward(x) };
        if let Some(y) = crate::adapters::forward_deltas_first(self, x, rows) {
            return y;
        }
        let y = self.forward(x);
        crate::adapters::add_deltas(self, x, &y, rows);
        y
    }

    /// `gelu_tanh(x W^T + b)`. On CUDA in bf16/f16 the bias and GELU run in the GEMM's
    /// epilogue (`fastvideo_kernels::linear_gelu_tanh`, cuBLASLt), which saves a pass over the
    /// FFN's wide output; elsewhere the GELU runs in place, since the FFN's output is the widest
    /// activation (0.55 GiB at 480x832x81 in bf16) and a second copy of it would be the block's
    /// memory peak.
    pub fn forward_gelu_tanh(&self, x: &Tensor) -> Tensor {
        self.forward_gelu_tanh_lora(x, None)
    }

    /// [`forward_gelu_tanh`](Self::forward_gelu_tanh) with the adapters' deltas added before
    /// the GELU (then unfused).
    pub fn forward_gelu_tanh_lora(&self, x: &Tensor, lora: Lora) -> Tensor {
        if let (None, None, Some(bias)) = (lora, &self.fp8_scale, &self.bias) {
            return fastvideo_kernels::linear_gelu_tanh(x, &self.weight, bias);
        }
        let mut y = self.forward_lora(x, lora);
        let _ = y.gelu_("tanh");
        y
    }
}

/// `[B, N, H*D] -> [B, H, N, D]`.
pub fn split_heads(x: &Tensor, heads: i64) -> Tensor {
    let (b, n, _) = x.size3().expect("rank-3 activations");
    x.view([b, n, heads, -1]).transpose(1, 2)
}

/// `[B, H, N, D] -> [B, N, H*D]`.
pub fn merge_heads(x: &Tensor) -> Tensor {
    let (b, _, n, _) = x.size4().expect("rank-4 activations");
    x.transpose(1, 2).contiguous().view([b, n, -1])
}

/// `conv3d` that takes oneDNN on the CPU for float32. libtorch's own choice sends the VAE's 3-D
/// convolutions (batch 1, 3×3×3, small channel counts) to its im2col `slow_conv3d`, 2–6× slower
/// on a 2-core CPU than oneDNN at the default model's shapes (docs/benchmarks.md, CPU section).
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
