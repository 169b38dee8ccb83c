//! The 8-bit kernels' function in float32 tch ops, on any device: [`reference`] for a recipe,
//! [`emulate`] for any subset of its roundings (how the quality gate traced its losses, and how a
//! CPU evaluates a recipe it cannot run).

use tch::{Kind, Tensor};

use super::{f16_v_scale, round_up, Pv, Recipe, BLOCK_N, P_SCALE, Q_GROUP};

/// Which roundings [`emulate`] applies: [`Emulation::of`] gives a kernel's; the others isolate
/// one rounding each (how the quality gate's losses were traced to their source).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Emulation {
    /// Q and K (smoothed) rounded to INT8, one scale per 16 query rows (or per row: `q_per_row`)
    /// and per 64 keys.
    pub int8_qk: bool,
    /// P rounded to e4m3 (scaled by 448).
    pub fp8_p: bool,
    /// V rounded to e4m3 (one scale per channel).
    pub fp8_v: bool,
    /// P and V rounded to f16 (V scaled per channel by a power of two, exact).
    pub f16_pv: bool,
    /// With `int8_qk`, one Q scale per row instead of per 16 ([`Recipe::q_per_row`]).
    pub q_per_row: bool,
    /// P (scaled by 448) rounded to bf16 (8 significant bits instead of f16's 11) and V as
    /// `f16_pv` has it (exact), i.e. a bf16 P·V ([`Recipe::bf16_pv`]).
    pub bf16_p: bool,
    /// V smoothed: its mean over the keys subtracted per channel before P·V's roundings, added
    /// to the output after ([`Recipe::v_smooth`]).
    pub v_smooth: bool,
    /// Research, no kernel computes it: the softmax denominator summed from the rounded P (the
    /// weights then sum to one, whatever their rounding), instead of from P before rounding. A
    /// kernel summing it with the tensor cores beside P·V ran at 24 % fewer TOPS on the H200, and its
    /// e4m3 sums drifted (FP8 accumulation), so it went (docs/benchmarks.md).
    pub l_rounded: bool,
}

impl Emulation {
    /// The function the kernel with this recipe computes.
    pub fn of(recipe: impl Into<Recipe>) -> Self {
        let r = recipe.into();
        let e = Emulation { int8_qk: true, q_per_row: r.q_per_row, v_smooth: r.v_smooth, ..Default::default() };
        match (r.pv, r.bf16_pv) {
            (Pv::Fp8Pv, _) => Emulation { fp8_p: true, fp8_v: true, ..e },
            (Pv::F16Pv, false) => Emulation { f16_pv: true, ..e },
            (Pv::F16Pv, true) => Emulation { bf16_p: true, ..e },
        }
    }

    /// A comma-separated list of `qk`, `p`, `v`, `f16`, `qrow`, `bf16`, `vmean` and `lq` (the
    /// fields, in order), e.g. `qk,f16`.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut e = Emulation::default();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "qk" => e.int8_qk = true,
                "p" => e.fp8_p = true,
                "v" => e.fp8_v = true,
                "f16" => e.f16_pv = true,
                "qrow" => e.q_per_row = true,
                "bf16" => e.bf16_p = true,
                "vmean" => e.v_smooth = true,
                "lq" => e.l_rounded = true,
                other => return Err(format!("`{other}` is not one of qk, p, v, f16, qrow, bf16, vmean, lq")),
            }
        }
        if (e.f16_pv || e.bf16_p) && (e.fp8_p || e.fp8_v) {
            return Err("f16 and bf16 P·V exclude the e4m3 roundings p and v".into());
        }
        if e.f16_pv && e.bf16_p {
            return Err("f16 and bf16 P·V exclude each other".into());
        }
        if e.q_per_row && !e.int8_qk {
            return Err("qrow changes INT8 Q·Kᵀ's scales: it needs qk".into());
        }
        Ok(e)
    }
}

/// The function the kernel computes, in float32 tch ops on any device: the same quantization of
/// Q, K (smoothed), V and P, a full softmax instead of the online one (so P's rounding sees the
/// row's final maximum, where the kernel's sees the running one). For tests and for stating the
/// kernel's error against SDPA on a machine without Hopper.
pub fn reference(q: &Tensor, k: &Tensor, v: &Tensor, recipe: impl Into<Recipe>) -> Tensor {
    emulate(q, k, v, Emulation::of(recipe))
}

/// Attention with the roundings `e` names applied, in float32 (`[B, N, H, D]` in and out).
pub fn emulate(q: &Tensor, k: &Tensor, v: &Tensor, e: Emulation) -> Tensor {
    let f = |t: &Tensor| t.to_kind(Kind::Float).transpose(1, 2); // [B, H, N, D]
    let (q, k, v) = (f(q), f(k), f(v));
    let d = q.size()[3];
    let (q, k) = match e.int8_qk {
        true => {
            let q_rows = if e.q_per_row { 1 } else { Q_GROUP };
            (quantize_int8_blocks(&q, q_rows), quantize_int8_blocks(&(&k - k.mean_dim(2, true, Kind::Float)), BLOCK_N))
        }
        false => (q, k),
    };
    let v_mean = e.v_smooth.then(|| v.mean_dim(2, true, Kind::Float));
    let v = match &v_mean {
        Some(m) => &v - m,
        None => v,
    };
    let vmax = v.abs().amax(2, true).clamp_min(1e-12);
    let v = if e.fp8_v {
        let vs = vmax / P_SCALE;
        (&v / &vs).to_kind(Kind::Float8e4m3fn).to_kind(Kind::Float) * &vs
    } else if e.f16_pv || e.bf16_p {
        // The 16-bit P·V's V type (exact either way unless V is smoothed).
        let vs = f16_v_scale(&vmax);
        let kind = if e.bf16_p { Kind::BFloat16 } else { Kind::Half };
        (&v / &vs).to_kind(kind).to_kind(Kind::Float) * &vs
    } else {
        v
    };
    let s = q.matmul(&k.transpose(2, 3)) / (d as f64).sqrt();
    let p = (&s - s.amax(3, true)).exp();
    let mut l = p.sum_dim_intlist(3, true, Kind::Float);
    let p = if e.fp8_p {
        (&p * P_SCALE).to_kind(Kind::Float8e4m3fn).to_kind(Kind::Float) / P_SCALE
    } else if e.f16_pv {
        (&p * P_SCALE).to_kind(Kind::Half).to_kind(Kind::Float) / P_SCALE
    } else if e.bf16_p {
        (&p * P_SCALE).to_kind(Kind::BFloat16).to_kind(Kind::Float) / P_SCALE
    } else {
        p
    };
    if e.l_rounded {
        l = p.sum_dim_intlist(3, true, Kind::Float);
    }
    let o = p.matmul(&v) / l;
    match v_mean {
        Some(m) => o + m,
        None => o,
    }
    .transpose(1, 2)
}

/// `x [B, H, N, D]` rounded to int8 steps with one scale per `rows` rows (absmax / 127), returned
/// dequantized.
fn quantize_int8_blocks(x: &Tensor, rows: i64) -> Tensor {
    let (b, h, n, d) = x.size4().expect("[B, H, N, D]");
    let pad = round_up(n, rows) - n;
    let xp = if pad > 0 { x.constant_pad_nd([0, 0, 0, pad]) } else { x.shallow_clone() };
    let blocks = xp.view([b, h, -1, rows, d]);
    let scale = blocks.abs().amax([3i64, 4].as_slice(), true).clamp_min(1e-20) / 127.0;
    let qv = (&blocks / &scale).round().clamp(-127.0, 127.0) * &scale;
    qv.view([b, h, -1, d]).narrow(2, 0, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulations_parse_from_a_list_and_name_the_bad_part() {
        assert_eq!(Emulation::parse("qk,p,v").unwrap(), Emulation::of(Recipe::plain(Pv::Fp8Pv)));
        assert_eq!(Emulation::parse("qk, f16").unwrap(), Emulation::of(Recipe::plain(Pv::F16Pv)));
        assert_eq!(Emulation::parse("").unwrap(), Emulation::default());
        assert!(Emulation::parse("qk,int4").unwrap_err().contains("`int4`"));
        assert!(Emulation::parse("f16,p").is_err());
        assert!(Emulation::parse("f16,bf16").is_err());
        assert!(Emulation::parse("qrow,f16").unwrap_err().contains("needs qk"));
        let r = Emulation::parse("qk,qrow,bf16").unwrap();
        assert!(r.int8_qk && r.q_per_row && r.bf16_p && !r.f16_pv);
    }
}
