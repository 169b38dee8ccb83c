//! `nn.Linear` as every family runs it: FP8 weights (`--fp8-linears`), the module slots adapters
//! address it by (unmerged LoRA rows added to its output), fused projections of one input, and
//! the residual add riding the GEMM of a decode step.

use anyhow::Result;
use fastvideo_kernels::fp8::Quantized;
use fastvideo_pipeline::{AdapterRows, ModuleDelta, PreparedAdapter};
use fastvideo_torch::weights::{GgmlType, LinearWeight, Weights};
use tch::{Kind, Tensor};

/// Which adapter rows a forward runs with (`None`: none, at no cost).
pub type Lora<'a> = Option<&'a AdapterRows<'a>>;

/// `nn.Linear` (`weight` is `[out, in]`).
pub struct Linear {
    /// `[out, in]`, in the compute dtype or FP8 (see `fp8_scale`); or, for a GGUF file's
    /// weight kept in ggml's blocks (see `ggml`), those blocks as 1-D `uint8`.
    pub weight: Tensor,
    /// `[out]`, when the linear has one.
    pub bias: Option<Tensor>,
    /// The checkpoint modules this linear computes: one, or several fused (their outputs
    /// concatenated), each with the module slot adapters address it by.
    parts: Vec<LinearPart>,
    /// Set when `weight` holds FP8 (e4m3) values (`--fp8-linears`): one float32 scale per
    /// output channel.
    fp8_scale: Option<Tensor>,
    /// Set when `weight` holds ggml blocks: dequantized per forward, just before the GEMM.
    ggml: Option<GgmlLayout>,
}

/// How a linear's ggml blocks lay out its rows: runs of rows in one block format each (fused
/// projections whose parts a K-quant mix stores in different types), in order.
#[derive(Clone, Debug)]
struct GgmlLayout {
    runs: Vec<GgmlRun>,
    in_dim: i64,
}

#[derive(Clone, Copy, Debug)]
struct GgmlRun {
    ty: GgmlType,
    rows: i64,
    bytes: i64,
}

impl GgmlLayout {
    fn out_dim(&self) -> i64 {
        self.runs.iter().map(|r| r.rows).sum()
    }
}

/// One checkpoint module inside a [`Linear`]: output rows `start..start + len`.
#[derive(Clone, Copy, Debug)]
pub struct LinearPart {
    /// The module slot adapters address it by.
    pub slot: usize,
    /// Its first output row in the fused linear.
    pub start: i64,
    /// Its output rows.
    pub len: i64,
}

/// Bytes a tensor holds.
pub fn tensor_bytes(t: &Tensor) -> u64 {
    t.numel() as u64 * t.kind().elt_size_in_bytes() as u64
}

impl Linear {
    /// Another handle to the same weights (nothing copied): for a second model built on weights
    /// this one holds (an omni model's reasoner on its text pathway).
    pub fn share(&self) -> Self {
        Self {
            weight: self.weight.shallow_clone(),
            bias: self.bias.as_ref().map(Tensor::shallow_clone),
            parts: self.parts.clone(),
            fp8_scale: self.fp8_scale.as_ref().map(Tensor::shallow_clone),
            ggml: self.ggml.clone(),
        }
    }

    /// Bytes its weight, bias and scales hold on the device.
    pub fn bytes(&self) -> u64 {
        [Some(&self.weight), self.bias.as_ref(), self.fp8_scale.as_ref()].into_iter().flatten().map(tensor_bytes).sum()
    }

    /// The module at `w`'s path, registered in the checkpoint's module table (so adapters can
    /// name it).
    pub fn new(w: &Weights, in_dim: i64, out_dim: i64, bias: bool) -> Result<Self> {
        let (weight, ggml, fp8_scale) = match w.get_linear(&[out_dim, in_dim])? {
            LinearWeight::Dense(t) => (t, None, None),
            LinearWeight::Ggml(g) => {
                let run = GgmlRun { ty: g.ty, rows: out_dim, bytes: g.bytes.numel() as i64 };
                (g.bytes, Some(GgmlLayout { runs: vec![run], in_dim }), None)
            }
            LinearWeight::Fp8 { values, scale } => (values, None, Some(scale)),
        };
        let bias = if bias { Some(w.get("bias", &[out_dim])?) } else { None };
        let slot = w.register_linear(in_dim, out_dim, bias.is_some());
        Ok(Self { weight, bias, parts: vec![LinearPart { slot, start: 0, len: out_dim }], fp8_scale, ggml })
    }

    /// Several projections of the same input as one (outputs concatenated in order), so they
    /// run as one GEMM. All parts or none have a bias. The parts are consumed, so their weights
    /// are freed as soon as the fused copy exists (not kept beside it while the rest of a layer
    /// loads).
    pub fn concat(mut parts: Vec<Linear>) -> Self {
        // FP8 parts (an FP8 checkpoint's) fuse as FP8 when all are; beside float parts they
        // are dequantized to the others' dtype.
        let all_fp8 = parts.iter().all(|p| p.fp8_scale.is_some());
        let float_kind = parts.iter().find(|p| !p.is_quantized()).map(|p| p.weight.kind());
        if let (false, Some(kind)) = (all_fp8, float_kind) {
            for p in parts.iter_mut() {
                if let Some(scale) = p.fp8_scale.take() {
                    p.weight = (p.weight.to_kind(Kind::Float) * scale.view([-1, 1])).to_kind(kind);
                }
            }
        }
        let fp8_scale =
            all_fp8.then(|| Tensor::cat(&parts.iter().flat_map(|p| p.fp8_scale.as_ref()).collect::<Vec<_>>(), 0));
        let ggml = parts.iter().any(|p| p.ggml.is_some()).then(|| ggml_concat(&parts));
        let weight = match ggml {
            Some(_) => Tensor::cat(&parts.iter().map(ggml_bytes).collect::<Vec<_>>(), 0),
            None => Tensor::cat(&parts.iter().map(|p| &p.weight).collect::<Vec<_>>(), 0),
        };
        let bias = parts.iter().map(|p| p.bias.as_ref()).collect::<Option<Vec<_>>>().map(|b| Tensor::cat(&b, 0));
        assert!(bias.is_some() || parts.iter().all(|p| p.bias.is_none()), "all parts or none have a bias");
        let mut offset = 0;
        let mut fused = Vec::new();
        for p in &parts {
            for q in &p.parts {
                fused.push(LinearPart { start: offset + q.start, ..*q });
            }
            // From the parts, not the weight: a deferred weight (lazy loading) is empty.
            offset += p.parts.iter().map(|q| q.len).sum::<i64>();
        }
        Self { weight, bias, parts: fused, fp8_scale, ggml }
    }

    /// The modules this linear computes.
    pub fn parts(&self) -> &[LinearPart] {
        &self.parts
    }

    /// `x Wᵀ + b` (through the FP8 kernel when the weight is FP8; ggml blocks dequantized
    /// first, in `x`'s dtype).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        match (&self.fp8_scale, &self.ggml) {
            (Some(scale), _) => fastvideo_kernels::fp8::linear(x, &self.weight, scale, self.bias.as_ref()),
            (None, Some(g)) => x.linear(&self.dense(g, x.kind()), self.bias.as_ref()),
            (None, None) => x.linear(&self.weight, self.bias.as_ref()),
        }
    }

    /// The `[out, in]` weight in `kind` from its ggml blocks, each run of rows decoded into its
    /// rows (`fastvideo_kernels::ggml`: on the GPU by a kernel of ours).
    fn dense(&self, g: &GgmlLayout, kind: Kind) -> Tensor {
        let w = Tensor::empty([g.out_dim(), g.in_dim], (kind, self.weight.device()));
        let (mut row, mut byte) = (0, 0);
        for r in &g.runs {
            let bytes = self.weight.narrow(0, byte, r.bytes);
            fastvideo_kernels::ggml::dequantize_into(&bytes, r.ty, &w.narrow(0, row, r.rows));
            row += r.rows;
            byte += r.bytes;
        }
        w
    }

    /// The block formats of the weight's rows when it is kept in ggml's blocks (a GGUF file).
    pub fn ggml_types(&self) -> Vec<GgmlType> {
        self.ggml.iter().flat_map(|g| g.runs.iter().map(|r| r.ty)).collect()
    }

    /// `acc += x Wᵀ + b` in place (`acc [.., out]`): the matmul accumulates into `acc` (a
    /// residual add), one launch instead of a matmul and an add, which is what a decode step,
    /// bound by launches, needs. An FP8 weight computes its output apart and adds it.
    pub fn forward_add(&self, acc: &Tensor, x: &Tensor) {
        if acc.is_contiguous() && !self.is_quantized() {
            let (out, inp) = self.weight.size2().expect("[out, in]");
            let _ = acc.view([-1, out]).addmm_(&x.reshape([-1, inp]), &self.weight.tr());
            if let Some(b) = &self.bias {
                let _ = acc.shallow_clone().g_add_(b);
            }
        } else {
            let _ = acc.shallow_clone().g_add_(&self.forward(x));
        }
    }

    /// [`forward_lora`](Self::forward_lora) with the input's FP8 quantization `q` computed once
    /// for several linears reading `x` (attention's projections); `q` is ignored by a linear
    /// not in FP8.
    pub fn forward_shared(&self, x: &Tensor, q: Option<&Quantized>, lora: Lora) -> Tensor {
        let (Some(scale), Some(q)) = (&self.fp8_scale, q) else { return self.forward_lora(x, lora) };
        let y = fastvideo_kernels::fp8::linear_quantized(q, &self.weight, scale, self.bias.as_ref());
        if let Some(rows) = lora {
            add_deltas(self, x, &y, rows);
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
    /// model is shared. A weight kept in ggml's blocks stays as it is (it is quantized already).
    pub fn quantize_fp8(&mut self) {
        if self.fp8_scale.is_none() && self.ggml.is_none() {
            let (values, scale) = fastvideo_kernels::fp8::quantize_weight(&self.weight);
            self.weight = values;
            self.fp8_scale = Some(scale);
        }
    }

    /// Whether the weight is stored in FP8.
    pub fn is_fp8(&self) -> bool {
        self.fp8_scale.is_some()
    }

    /// Whether the weight is stored quantized, in FP8 or ggml's blocks (then adapters run
    /// unmerged only).
    pub fn is_quantized(&self) -> bool {
        self.fp8_scale.is_some() || self.ggml.is_some()
    }

    /// [`forward`](Self::forward) plus each row group's adapter deltas (unmerged LoRA:
    /// `y += s · scale · up(down(x))` per adapter, rows gathered per set).
    pub fn forward_lora(&self, x: &Tensor, lora: Lora) -> Tensor {
        let Some(rows) = lora else { return self.forward(x) };
        if let Some(y) = forward_deltas_first(self, x, rows) {
            return y;
        }
        let y = self.forward(x);
        add_deltas(self, x, &y, rows);
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
            return match &self.ggml {
                Some(g) => fastvideo_kernels::linear_gelu_tanh(x, &self.dense(g, x.kind()), bias),
                None => fastvideo_kernels::linear_gelu_tanh(x, &self.weight, bias),
            };
        }
        let mut y = self.forward_lora(x, lora);
        let _ = y.gelu_("tanh");
        y
    }
}

/// The runs of a concatenation of linears of which some keep ggml blocks: a dense part joins as
/// a run of its plain float type.
fn ggml_concat(parts: &[Linear]) -> GgmlLayout {
    let mut runs = Vec::new();
    let mut in_dim = 0;
    for p in parts {
        match &p.ggml {
            Some(g) => {
                runs.extend_from_slice(&g.runs);
                in_dim = g.in_dim;
            }
            None => {
                let (rows, cols) = p.weight.size2().expect("[out, in]");
                let ty = match p.weight.kind() {
                    Kind::Float => GgmlType::F32,
                    Kind::Half => GgmlType::F16,
                    Kind::BFloat16 => GgmlType::BF16,
                    other => panic!("a {other:?} weight fused with GGUF blocks"),
                };
                runs.push(GgmlRun { ty, rows, bytes: rows * cols * p.weight.kind().elt_size_in_bytes() as i64 });
                in_dim = cols;
            }
        }
    }
    GgmlLayout { runs, in_dim }
}

/// A part's weight as bytes (1-D `uint8`), for [`ggml_concat`]'s buffer.
fn ggml_bytes(p: &Linear) -> Tensor {
    match p.ggml {
        Some(_) => p.weight.shallow_clone(),
        None => p.weight.contiguous().view_dtype(Kind::Uint8).reshape([-1]),
    }
}

/// `lin(x)` plus the deltas of one set that covers every row and adds only low-rank pairs (the
/// common case: every request in the step uses the same adapters), with the deltas computed
/// first: the first up projection of each part writes the output (with the bias), and the base
/// GEMM accumulates into it (beta = 1). That saves the full-width pass an up projection added
/// after the base GEMM makes, the unmerged path's main cost at real size (docs/benchmarks.md).
/// `None` when the rows or deltas are of another shape; [`add_deltas`] handles those.
fn forward_deltas_first(lin: &Linear, x: &Tensor, rows: &AdapterRows) -> Option<Tensor> {
    if lin.is_quantized() {
        return None;
    }
    let n = x.size()[0];
    let [(set, 0, len)] = rows.groups[..] else { return None };
    if len < n {
        return None;
    }
    fn delta(adapter: &PreparedAdapter, slot: usize, text: bool) -> Option<&ModuleDelta> {
        if text {
            adapter.text_delta(slot)
        } else {
            adapter.delta(slot)
        }
    }
    for (adapter, _) in set.entries() {
        for part in lin.parts() {
            if delta(adapter, part.slot, rows.text)
                .is_some_and(|d| d.diff.is_some() || d.diff_b.is_some() || d.low_rank.is_none())
            {
                return None;
            }
        }
    }
    let mut shape = x.size();
    let din = shape.pop().unwrap_or(0);
    let dout = lin.weight.size()[0];
    let x2 = x.reshape([-1, din]);
    let y = Tensor::empty([x2.size()[0], dout], (x.kind(), x.device()));
    for part in lin.parts() {
        let out = y.narrow(1, part.start, part.len);
        let bias = lin.bias.as_ref().map(|b| b.narrow(0, part.start, part.len));
        let mut written = false;
        for (adapter, strength) in set.entries() {
            let Some((down, up, scale)) = delta(adapter, part.slot, rows.text).and_then(|d| d.low_rank.as_ref()) else {
                continue;
            };
            let h = x2.linear(down, None::<Tensor>) * (strength * scale);
            let mut out = out.shallow_clone();
            if written {
                let _ = out.addmm_(&h, &up.tr());
            } else {
                let _ = match &bias {
                    Some(b) => b.addmm_out(&out, &h, &up.tr()),
                    None => h.mm_out(&out, &up.tr()),
                };
                written = true;
            }
        }
        if !written {
            let mut out = out.shallow_clone();
            match &bias {
                Some(b) => out.copy_(&b.expand_as(&out)),
                None => {
                    let _ = out.zero_();
                }
            }
        }
    }
    let mut y = y;
    let _ = y.addmm_(&x2, &lin.weight.tr());
    shape.push(dout);
    Some(y.view(shape.as_slice()))
}

/// Adds each row group's deltas to `y = lin(x)` in place (rows of dimension 0).
fn add_deltas(lin: &Linear, x: &Tensor, y: &Tensor, rows: &AdapterRows) {
    let n = x.size()[0];
    for &(set, start, len) in &rows.groups {
        let len = len.min(n - start);
        let mut xs: Option<Tensor> = None;
        for (adapter, strength) in set.entries() {
            for part in lin.parts() {
                let d = if rows.text { adapter.text_delta(part.slot) } else { adapter.delta(part.slot) };
                let Some(d) = d else { continue };
                let xs = xs.get_or_insert_with(|| x.narrow(0, start, len));
                let mut out = y.narrow(0, start, len).narrow(-1, part.start, part.len);
                // The scale goes on the rank-sized product, and the up projection accumulates into
                // the output in place (one GEMM with beta = 1): the full-width intermediate, its
                // scaling and the add were each a pass over the output, most of the unmerged
                // path's cost at real size (docs/benchmarks.md).
                if let Some((down, up, scale)) = &d.low_rank {
                    let h = xs.linear(down, None::<Tensor>) * (strength * scale);
                    let r = h.size().last().copied().unwrap_or(0);
                    let _ = out.view([-1, part.len]).addmm_(&h.view([-1, r]), &up.tr());
                }
                if let Some(diff) = &d.diff {
                    out += xs.linear(diff, None::<Tensor>) * *strength;
                }
                if let Some(db) = &d.diff_b {
                    out += db * *strength;
                }
            }
        }
    }
}
