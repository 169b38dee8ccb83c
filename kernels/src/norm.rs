//! LayerNorm (or RMSNorm) with adaLN modulation, fused with the (gated) residual add before it.
//!
//! In diffusers' Wan block every norm is `FP32LayerNorm` on an upcast residual stream, followed by
//! `* (1 + scale) + shift` in fp32 and a cast back; every residual add is
//! `(x.float() + y * gate).type_as(x)`. One kernel does both in one pass over the row. LTX-2's
//! blocks do the same around a weightless RMSNorm, with modulation per sample or per token.

use tch::{Kind, Tensor};

use crate::cuda::{self, Arg};

/// What follows the (optional) residual add: a LayerNorm over the last dim, optionally affine
/// (`weight`, `bias`), optionally modulated (`* (1 + scale) + shift`). `scale`/`shift` are
/// `[B, 1, D]` or `[B, D]`.
#[derive(Clone, Copy)]
pub struct LayerNormSpec<'a> {
    /// The LayerNorm's epsilon.
    pub eps: f64,
    /// `(weight, bias)` of an affine LayerNorm; `None` for a plain one.
    pub affine: Option<(&'a Tensor, &'a Tensor)>,
    /// `(scale, shift)`, `[B, 1, D]` or `[B, D]`: the output is `norm * (1 + scale) + shift`;
    /// `None` for none.
    pub modulation: Option<(&'a Tensor, &'a Tensor)>,
}

/// A weightless RMSNorm over the last dim, optionally modulated (`* (1 + scale) + shift`, the
/// vectors `[B, 1, D]`, `[B, D]` or per token `[B, N, D]`).
#[derive(Clone, Copy)]
pub struct RmsNormSpec<'a> {
    /// The norm's epsilon.
    pub eps: f64,
    /// `(scale, shift)`, or `None` for none.
    pub modulation: Option<(&'a Tensor, &'a Tensor)>,
}

/// Which norm follows the residual add.
#[derive(Clone, Copy)]
enum Norm<'a> {
    Layer(&'a LayerNormSpec<'a>),
    Rms(&'a RmsNormSpec<'a>),
}

impl Norm<'_> {
    fn eps(&self) -> f64 {
        match self {
            Norm::Layer(s) => s.eps,
            Norm::Rms(s) => s.eps,
        }
    }

    fn modulation(&self) -> Option<(&Tensor, &Tensor)> {
        match self {
            Norm::Layer(s) => s.modulation,
            Norm::Rms(s) => s.modulation,
        }
    }

    fn affine(&self) -> Option<(&Tensor, &Tensor)> {
        match self {
            Norm::Layer(s) => s.affine,
            Norm::Rms(_) => None,
        }
    }
}

/// `LayerNorm(x)` per `spec`, computed in fp32 and stored in `x`'s dtype. `x` is `[B, N, D]`.
pub fn layer_norm_modulate(x: &Tensor, spec: &LayerNormSpec) -> Tensor {
    fused(x, None, Some(Norm::Layer(spec))).1.expect("norm requested")
}

/// `RMSNorm(x)` per `spec`, computed in fp32 and stored in `x`'s dtype. `x` is `[B, N, D]`.
pub fn rms_norm_modulate(x: &Tensor, spec: &RmsNormSpec) -> Tensor {
    fused(x, None, Some(Norm::Rms(spec))).1.expect("norm requested")
}

/// `x' = x + y * gate`, then `RMSNorm(x')` per `spec`; returns `(x', norm)`, the norm of `x'` as
/// stored.
pub fn residual_rms_norm_modulate(
    x: &Tensor,
    y: &Tensor,
    gate: Option<&Tensor>,
    spec: &RmsNormSpec,
) -> (Tensor, Tensor) {
    let (x, n) = fused(x, Some((y, gate)), Some(Norm::Rms(spec)));
    (x, n.expect("norm requested"))
}

/// `x + y * gate` (gate `[B, 1, D]`/`[B, D]`, or 1 when absent) computed in fp32, stored in `x`'s dtype.
pub fn gated_residual(x: &Tensor, y: &Tensor, gate: Option<&Tensor>) -> Tensor {
    fused(x, Some((y, gate)), None).0
}

/// Both: `x' = x + y * gate`, then `LayerNorm(x')` per `spec`; returns `(x', norm)`. The norm
/// sees `x'` as stored (rounded to `x`'s dtype), as in the reference.
pub fn residual_layer_norm_modulate(
    x: &Tensor,
    y: &Tensor,
    gate: Option<&Tensor>,
    spec: &LayerNormSpec,
) -> (Tensor, Tensor) {
    let (x, n) = fused(x, Some((y, gate)), Some(Norm::Layer(spec)));
    (x, n.expect("norm requested"))
}

fn fused(x: &Tensor, residual: Option<(&Tensor, Option<&Tensor>)>, spec: Option<Norm>) -> (Tensor, Option<Tensor>) {
    if let Some(out) = try_kernel(x, residual, spec) {
        return out;
    }
    fallback(x, residual, spec)
}

/// `[B, D]` → `[B, 1, D]` so per-sample vectors broadcast over tokens.
fn per_sample(t: &Tensor) -> Tensor {
    if t.dim() == 2 {
        t.unsqueeze(1)
    } else {
        t.shallow_clone()
    }
}

/// The same function in tch ops: the CPU path, and the CUDA path for shapes the kernel refuses.
fn fallback(x: &Tensor, residual: Option<(&Tensor, Option<&Tensor>)>, spec: Option<Norm>) -> (Tensor, Option<Tensor>) {
    let kind = x.kind();
    let x = match residual {
        Some((y, gate)) => {
            let y = y.to_kind(Kind::Float);
            let add = match gate {
                Some(g) => y * per_sample(&g.to_kind(Kind::Float)),
                None => y,
            };
            (x.to_kind(Kind::Float) + add).to_kind(kind)
        }
        None => x.shallow_clone(),
    };
    let norm = spec.map(|s| {
        let d = *x.size().last().expect("rank >= 1");
        let h = match s {
            Norm::Layer(s) => {
                let (w, b) = match s.affine {
                    Some((w, b)) => (Some(w.to_kind(Kind::Float)), Some(b.to_kind(Kind::Float))),
                    None => (None, None),
                };
                x.to_kind(Kind::Float).layer_norm([d], w.as_ref(), b.as_ref(), s.eps, true)
            }
            Norm::Rms(s) => x.to_kind(Kind::Float).rms_norm([d], None::<&Tensor>, s.eps),
        };
        let h = match s.modulation() {
            Some((scale, shift)) => {
                h * (per_sample(&scale.to_kind(Kind::Float)) + 1.0) + per_sample(&shift.to_kind(Kind::Float))
            }
            None => h,
        };
        h.to_kind(kind)
    });
    (x, norm)
}

/// How an fp32 modulation vector the kernel can read is laid out: one row per sample or one per
/// token, with the stride (elements) between rows.
#[derive(Clone, Copy, PartialEq)]
enum ModLayout {
    PerSample(i64),
    PerToken(i64),
}

fn mod_layout(t: &Tensor, b: i64, n: i64, d: i64) -> Option<ModLayout> {
    let s = t.size();
    let st = t.stride();
    if t.kind() != Kind::Float {
        return None;
    }
    if (s == [b, 1, d] && st[2] == 1) || (s == [b, d] && st[1] == 1) {
        return Some(ModLayout::PerSample(st[0]));
    }
    // Per token: rows evenly spaced across the batch too, so row `r` sits at `r · st[1]`.
    (n > 1 && s == [b, n, d] && st[2] == 1 && st[0] == n * st[1]).then_some(ModLayout::PerToken(st[1]))
}

fn try_kernel(
    x: &Tensor,
    residual: Option<(&Tensor, Option<&Tensor>)>,
    spec: Option<Norm>,
) -> Option<(Tensor, Option<Tensor>)> {
    let dev = cuda::for_tensor(x)?;
    let rms = matches!(spec, Some(Norm::Rms(_)));
    let name = match (x.kind(), rms) {
        (Kind::BFloat16, false) => "norm_modulate_bf16",
        (Kind::Half, false) => "norm_modulate_f16",
        (Kind::Float, false) => "norm_modulate_f32",
        (Kind::BFloat16, true) => "rms_modulate_bf16",
        (Kind::Half, true) => "rms_modulate_f16",
        (Kind::Float, true) => "rms_modulate_f32",
        _ => return None,
    };
    let (b, n, d) = x.size3().ok()?;
    if !x.is_contiguous() || !cuda::row_fits(d) || !cuda::aligned(x) {
        return None;
    }
    let same_device = |t: &Tensor| t.device() == x.device();
    // Every vector must share one layout and row stride (they are chunks of one modulation
    // tensor); a single sample's per-sample vectors need no stride.
    let mut layout: Option<ModLayout> = None;
    let mut take = |t: &Tensor| -> Option<u64> {
        let l = match mod_layout(t, b, n, d).filter(|_| same_device(t) && cuda::aligned(t))? {
            ModLayout::PerSample(_) if b == 1 => ModLayout::PerSample(0),
            l => l,
        };
        let (ModLayout::PerSample(s) | ModLayout::PerToken(s)) = l;
        if s % 4 != 0 || layout.is_some_and(|p| p != l) {
            return None;
        }
        layout = Some(l);
        Some(t.data_ptr() as u64)
    };
    let (y_ptr, gate_ptr) = match residual {
        Some((y, gate)) => {
            if y.size() != x.size()
                || y.kind() != x.kind()
                || !y.is_contiguous()
                || !same_device(y)
                || !cuda::aligned(y)
            {
                return None;
            }
            (
                y.data_ptr() as u64,
                match gate {
                    Some(g) => take(g)?,
                    None => 0,
                },
            )
        }
        None => (0, 0),
    };
    let (w_ptr, b_ptr, scale_ptr, shift_ptr, eps) = match spec {
        Some(s) => {
            let (w, bias) = match s.affine() {
                Some((w, bias)) => {
                    let dense = |t: &Tensor| {
                        t.size() == [d]
                            && t.kind() == Kind::Float
                            && t.is_contiguous()
                            && same_device(t)
                            && cuda::aligned(t)
                    };
                    if !dense(w) || !dense(bias) {
                        return None;
                    }
                    (w.data_ptr() as u64, bias.data_ptr() as u64)
                }
                None => (0, 0),
            };
            let (sc, sh) = match s.modulation() {
                Some((sc, sh)) => (take(sc)?, take(sh)?),
                None => (0, 0),
            };
            (w, bias, sc, sh, s.eps() as f32)
        }
        None => (0, 0, 0, 0, 0.0),
    };
    let x_out = residual.map(|_| x.empty_like());
    let out = spec.map(|_| x.empty_like());
    let ptr = |t: &Option<Tensor>| t.as_ref().map_or(0, |t| t.data_ptr() as u64);
    let args = [
        Arg::Ptr(x.data_ptr() as u64),
        Arg::Ptr(y_ptr),
        Arg::Ptr(gate_ptr),
        Arg::Ptr(ptr(&x_out)),
        Arg::Ptr(w_ptr),
        Arg::Ptr(b_ptr),
        Arg::Ptr(scale_ptr),
        Arg::Ptr(shift_ptr),
        Arg::I64(match layout {
            Some(ModLayout::PerSample(s) | ModLayout::PerToken(s)) => s,
            None => 0,
        }),
        Arg::Ptr(ptr(&out)),
        // The kernel picks a vector's row as `row / rows_per_batch`.
        Arg::I32(if matches!(layout, Some(ModLayout::PerToken(_))) { 1 } else { n as i32 }),
        Arg::I32(d as i32),
        Arg::F32(eps),
    ];
    dev.launch_rows(name, b * n, 1, d, &args).ok()?;
    Some((x_out.unwrap_or_else(|| x.shallow_clone()), out))
}
