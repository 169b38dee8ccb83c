//! 8-bit attention (`precision = fast` where the quality gate admits it): SageAttention2's recipe
//! on Hopper. Q·Kᵀ runs in INT8 with K smoothed (its mean over the keys subtracted, which the
//! softmax cannot see), one scale per query row and per 64 keys; P·V runs in FP8 (e4m3) with V
//! smoothed the same way (its mean added back to the output), one scale per V channel and P
//! scaled onto e4m3's range; softmax and the running output stay in float32, each key tile's P·V
//! added to it in float32 (FP8 tensor-core accumulation keeps fewer bits than float32). A second
//! recipe ([`Pv::F16Pv`], `--int8-qk-attention`) keeps INT8 Q·Kᵀ but runs P·V in f16, at half
//! e4m3's rate and closer to exact. [`Recipe`] names the options each recipe ships with and the
//! others the gate compared (docs/benchmarks.md). The kernels are `kernels/cuda/attention8.cu`,
//! compiled for `sm_90a` (wgmma). Everywhere else (another GPU, a CPU, a head dim other than
//! 128, other dtypes) the op is bf16 SDPA; [`reference`] computes the quantized function in
//! float32 for tests.

use cudarc::driver::LaunchConfig;
use tch::{Device, Kind, Tensor};

use crate::cuda::{self, Arg, DeviceKernels};

mod emulation;
pub use emulation::{emulate, reference, Emulation};

const HEAD_DIM: i64 = 128;
const BLOCK_M: i64 = 128;
const BLOCK_N: i64 = 64;
/// Keys per step of the attention kernel (two quantization blocks): the keys pad to it.
const TILE_N: i64 = 128;
/// Query rows per Q scale unless the recipe asks for one per row (one warp's rows).
const Q_GROUP: i64 = 16;
/// Rows per CTA of the int8 quantize kernel (`QUANT_ROWS`) and keys per CTA of `kv_stats`
/// (`STAT_ROWS`), as attention8_quant.cu defines them.
const QUANT_ROWS: i64 = 64;
const STAT_ROWS: i64 = 256;
const P_SCALE: f64 = 448.0;

/// Which recipe: what P·V runs in (Q·Kᵀ is INT8 either way).
pub use fastvideo_torch::Int8Attention as Pv;

/// What the kernel computes beyond P·V's type. [`Recipe::for_pv`] is what [`attention`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recipe {
    /// What P·V runs in.
    pub pv: Pv,
    /// One Q scale per query row instead of per 16 rows. The quality gate's INT8 Q·Kᵀ loss came
    /// from the shared scale (host/scripts/cpu/results/2026-12-04-qrow/).
    pub q_per_row: bool,
    /// With [`Pv::F16Pv`]: P·V in bf16 instead of f16 (P keeps 8 significant bits instead of 11;
    /// V is exact in either).
    pub bf16_pv: bool,
    /// V smoothed: its mean over the keys subtracted per channel before P·V and added to the
    /// output after (the weights sum to one), so P's rounding errors multiply V's spread
    /// instead of its offset, and V's scale covers the spread only.
    pub v_smooth: bool,
}

impl Recipe {
    /// No options: one Q scale per 16 query rows, P·V in `pv`'s type, V and the softmax
    /// denominator as they come (the recipe before the quality gate's options).
    pub const fn plain(pv: Pv) -> Self {
        Recipe { pv, q_per_row: false, bf16_pv: false, v_smooth: false }
    }

    /// The recipe shipped for `pv`, as the quality gate admitted it (docs/benchmarks.md,
    /// host/scripts/cpu/results/2026-12-04-vmean/): one Q scale per row for both, and V smoothed
    /// for e4m3 P·V, whose rounding of P multiplies V's offset otherwise.
    pub const fn shipped(pv: Pv) -> Self {
        let plain = Recipe::plain(pv);
        match pv {
            Pv::Fp8Pv => Recipe { q_per_row: true, v_smooth: true, ..plain },
            Pv::F16Pv => Recipe { q_per_row: true, ..plain },
        }
    }

    /// The shipped recipe; with `FASTVIDEO_ATTN8_RECIPE` set (research), the plain one with
    /// exactly the options it lists (`qrow`, `bf16`, `vmean`; `none` for none), read once.
    /// The kernel and the CPU emulation both follow it.
    pub fn for_pv(pv: Pv) -> Self {
        static OPTIONS: std::sync::OnceLock<Option<Recipe>> = std::sync::OnceLock::new();
        let options = OPTIONS.get_or_init(|| {
            let list = std::env::var("FASTVIDEO_ATTN8_RECIPE").ok()?;
            let options = Recipe::plain(Pv::F16Pv)
                .with_options(&list)
                .map_err(|e| tracing::warn!("FASTVIDEO_ATTN8_RECIPE: {e}; running the shipped recipe"))
                .ok()?;
            // Research only: the run reports the preset, not that its recipe was replaced.
            tracing::warn!(
                "FASTVIDEO_ATTN8_RECIPE={list}: 8-bit attention runs these options instead of the shipped ones"
            );
            Some(options)
        });
        match options {
            Some(o) => Recipe { pv, bf16_pv: o.bf16_pv && pv == Pv::F16Pv, ..*o },
            None => Recipe::shipped(pv),
        }
    }

    /// This recipe with the options in a comma-separated list of `qrow`, `bf16` and `vmean`
    /// added (`none` adds nothing).
    pub fn with_options(mut self, list: &str) -> Result<Self, String> {
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "none" => {}
                "qrow" => self.q_per_row = true,
                "bf16" => self.bf16_pv = true,
                "vmean" => self.v_smooth = true,
                other => return Err(format!("`{other}` is not one of qrow, bf16, vmean, none")),
            }
        }
        Ok(self)
    }

    fn q_rows(self) -> i64 {
        if self.q_per_row {
            1
        } else {
            Q_GROUP
        }
    }
}

impl From<Pv> for Recipe {
    fn from(pv: Pv) -> Self {
        Recipe::for_pv(pv)
    }
}

/// Attention over heads for `q [B, N, H, D]`, `k, v [B, M, H, D]`, returning `[B, N, H, D]` in
/// q's dtype: the 8-bit kernel where [`fits`] says so, else SDPA (which computes the exact
/// function the kernel approximates).
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, pv: Pv) -> Tensor {
    attention_with(q, k, v, Recipe::for_pv(pv))
}

/// [`attention`] with the recipe given.
pub fn attention_with(q: &Tensor, k: &Tensor, v: &Tensor, recipe: Recipe) -> Tensor {
    if let Some(kernels) = fits(q, k, v) {
        match run(&kernels, q, k, v, recipe) {
            Ok(o) => return o,
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "8-bit attention failed; using SDPA"),
        }
    }
    sdpa(q, k, v)
}

/// SDPA on the `[B, N, H, D]` layout.
pub fn sdpa(q: &Tensor, k: &Tensor, v: &Tensor) -> Tensor {
    let t = |x: &Tensor| x.transpose(1, 2);
    Tensor::scaled_dot_product_attention(&t(q), &t(k), &t(v), None::<Tensor>, 0.0, false, None, false).transpose(1, 2)
}

/// Whether the 8-bit kernel can run on these inputs: CUDA with the `sm_90a` module, bf16, head
/// dim 128, matching batch and heads, the head dim contiguous and every row 16-byte aligned.
pub fn fits(q: &Tensor, k: &Tensor, v: &Tensor) -> Option<std::sync::Arc<DeviceKernels>> {
    let kernels = cuda::for_tensor(q)?;
    if !kernels.sm90 {
        return None;
    }
    let (qs, ks, vs) = (q.size(), k.size(), v.size());
    let shapes = qs.len() == 4
        && ks.len() == 4
        && ks == vs
        && qs[0] == ks[0]
        && qs[2] == ks[2]
        && qs[3] == HEAD_DIM
        && ks[3] == HEAD_DIM
        && qs[1] > 0
        && ks[1] > 0;
    let dtypes = [q, k, v].iter().all(|t| t.kind() == Kind::BFloat16 && t.device() == q.device());
    let strides = [q, k, v].iter().all(|t| {
        let s = t.stride();
        s[3] == 1 && s[..3].iter().all(|&x| x % 8 == 0) && cuda::aligned(t)
    });
    (shapes && dtypes && strides).then_some(kernels)
}

fn round_up(n: i64, m: i64) -> i64 {
    (n + m - 1) / m * m
}

fn run(kernels: &DeviceKernels, q: &Tensor, k: &Tensor, v: &Tensor, recipe: Recipe) -> anyhow::Result<Tensor> {
    let (b, nq, h, _) = q.size4()?;
    let nk = k.size()[1];
    let (nq_pad, nk_pad) = (round_up(nq, BLOCK_M), round_up(nk, TILE_N));
    let dev = q.device();
    let ptr = |t: &Tensor| Arg::Ptr(t.data_ptr() as u64);
    let strides = |t: &Tensor| {
        let s = t.stride();
        [Arg::I64(s[0]), Arg::I64(s[1]), Arg::I64(s[2])]
    };
    let grid = |rows: i64, per: i64| LaunchConfig {
        grid_dim: ((rows / per) as u32, h as u32, b as u32),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    };
    let (h32, nq32, nk32) = (h as i32, nq as i32, nk as i32);

    let qi = Tensor::empty([b, h, nq_pad, HEAD_DIM], (Kind::Int8, dev));
    let q_rows = recipe.q_rows();
    let qsc = Tensor::empty([b, h, nq_pad / q_rows], (Kind::Float, dev));
    let softmax = (HEAD_DIM as f64).sqrt().recip() * std::f64::consts::LOG2_E;
    let mut args = vec![ptr(q)];
    args.extend(strides(q));
    args.extend([Arg::I32(nq32), Arg::I32(nq_pad as i32), Arg::I32(h32), Arg::I32(q_rows as i32)]);
    args.extend([Arg::Ptr(0), Arg::F32(1.0), Arg::F32(softmax as f32), ptr(&qi), ptr(&qsc)]);
    kernels.launch("quant_int8_rows", grid(nq_pad, QUANT_ROWS), &args)?;

    // K smoothed by its mean over the keys; V's per-channel maxima of V and −V, and sums: one
    // pass over both into per-block partials [4, B, H, blocks, D], reduced here in a fixed order.
    let blocks = (nk + STAT_ROWS - 1) / STAT_ROWS;
    let part = Tensor::empty([4, b, h, blocks, HEAD_DIM], (Kind::Float, dev));
    let mut args = vec![ptr(k)];
    args.extend(strides(k));
    args.push(ptr(v));
    args.extend(strides(v));
    args.extend([Arg::I32(nk32), Arg::I32(h32), Arg::I32(blocks as i32), ptr(&part)]);
    kernels.launch("kv_stats", grid(blocks, 1), &args)?;
    let k_sum = part.get(0).sum_dim_intlist([2i64].as_slice(), false, Kind::Float).contiguous();
    let (v_mean, v_max) = v_offset_and_range(&part, nk, recipe.v_smooth);
    let v_mean_ptr = v_mean.as_ref().map_or(Arg::Ptr(0), ptr);
    // Per recipe: the range V is scaled onto, its storage, and the two kernels that differ.
    let (v_kind, v_quant, attn) = match (recipe.pv, recipe.bf16_pv) {
        (Pv::Fp8Pv, _) => (Kind::Uint8, "quant_v_fp8t", "attention_int8_fp8_sm90"),
        (Pv::F16Pv, false) => (Kind::Half, "quant_v_16t", "attention_int8_f16_sm90"),
        (Pv::F16Pv, true) => (Kind::BFloat16, "quant_v_16t", "attention_int8_bf16_sm90"),
    };
    let vscale = match recipe.pv {
        Pv::Fp8Pv => v_max.clamp_min(1e-12) / P_SCALE,
        Pv::F16Pv => f16_v_scale(&v_max),
    }
    .contiguous();
    let ki = Tensor::empty([b, h, nk_pad, HEAD_DIM], (Kind::Int8, dev));
    let ksc = Tensor::empty([b, h, nk_pad / BLOCK_N], (Kind::Float, dev));
    let mut args = vec![ptr(k)];
    args.extend(strides(k));
    args.extend([Arg::I32(nk32), Arg::I32(nk_pad as i32), Arg::I32(h32), Arg::I32(BLOCK_N as i32)]);
    args.extend([ptr(&k_sum), Arg::F32((1.0 / nk as f64) as f32), Arg::F32(1.0), ptr(&ki), ptr(&ksc)]);
    kernels.launch("quant_int8_rows", grid(nk_pad, QUANT_ROWS), &args)?;

    let vt = Tensor::empty([b, h, nk_pad / BLOCK_N, HEAD_DIM, BLOCK_N], (v_kind, dev));
    let mut args = vec![ptr(v)];
    args.extend(strides(v));
    args.extend([Arg::I32(nk32), Arg::I32(nk_pad as i32), Arg::I32(h32), ptr(&vscale), v_mean_ptr]);
    if recipe.pv == Pv::F16Pv {
        args.push(Arg::I32(recipe.bf16_pv as i32));
    }
    args.push(ptr(&vt));
    kernels.launch(v_quant, grid(nk_pad, BLOCK_N), &args)?;

    let out = Tensor::empty([b, nq, h, HEAD_DIM], (Kind::BFloat16, dev));
    let mut args = vec![ptr(&qi), ptr(&qsc), Arg::I32(q_rows as i32), ptr(&ki), ptr(&ksc), ptr(&vt), ptr(&vscale)];
    args.extend([v_mean_ptr, ptr(&out)]);
    args.extend(strides(&out));
    args.extend([Arg::I32(nq32), Arg::I32(nq_pad as i32), Arg::I32(nk32), Arg::I32(nk_pad as i32), Arg::I32(h32)]);
    let cfg = LaunchConfig {
        grid_dim: ((nq_pad / BLOCK_M) as u32, h as u32, b as u32),
        // Two consumer warpgroups and, as shipped, a producer one (attention8.cu's PRODUCER).
        block_dim: (kernels.block_threads(attn)?, 1, 1),
        shared_mem_bytes: cuda::ATTENTION8_SMEM,
    };
    kernels.launch(attn, cfg, &args)?;
    Ok(out)
}

/// From `kv_stats`' partials `[4, B, H, blocks, D]` (sums of K; maxima of V and of −V; sums of
/// V): V's offset per channel (its mean over the `nk` keys when smoothing, else none) and the
/// largest |V − offset| (`[B, H, D]`). Without smoothing, one reduction over both maxima.
fn v_offset_and_range(part: &Tensor, nk: i64, smooth: bool) -> (Option<Tensor>, Tensor) {
    if !smooth {
        return (None, part.narrow(0, 1, 2).amax([0i64, 3].as_slice(), false));
    }
    let over_blocks = [2i64].as_slice();
    let mean = part.get(3).sum_dim_intlist(over_blocks, false, Kind::Float) / nk as f64;
    let (hi, neg_lo) = (part.get(1).amax(over_blocks, false), part.get(2).amax(over_blocks, false));
    let max = (hi - &mean).maximum(&(neg_lo + &mean));
    (Some(mean.contiguous()), max)
}

/// The f16 P·V recipe's per-channel V scale: the power of two at or above the channel's
/// largest |V|. A bf16 V divided by it is exact in f16 (8 significant bits of 11), so the
/// recipe rounds nothing in V, and the low three mantissa bits the tensor cores multiply are
/// zero: the kernel runs at the board's power limit, and such operands cost less energy (1.6-2 %
/// faster at 32,760 tokens; host/scripts/gpu/results/2026-12-04-gelu-epilogue/).
fn f16_v_scale(v_max: &Tensor) -> Tensor {
    v_max.clamp_min(1e-12).log2().ceil().exp2()
}

/// Whether the 8-bit kernel is available on CUDA device `ordinal` (Hopper, kernels compiled).
pub fn available(device: Device) -> bool {
    match device {
        Device::Cuda(i) => crate::enabled() && cuda::device(i).is_some_and(|k| k.sm90),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_l2(a: &Tensor, b: &Tensor) -> f64 {
        let (a, b) = (a.to_kind(Kind::Double), b.to_kind(Kind::Double));
        (&a - &b).norm().double_value(&[]) / b.norm().double_value(&[])
    }

    fn qkv(b: i64, nq: i64, nk: i64, h: i64, seed: i64) -> (Tensor, Tensor, Tensor) {
        let _rng = crate::seeded(seed);
        let o = (Kind::Float, Device::Cpu);
        // Keys with a shared offset per channel (what smoothing removes) and a few outlier
        // channels, as real activations have.
        let k = Tensor::randn([b, nk, h, HEAD_DIM], o) + Tensor::randn([1, 1, h, HEAD_DIM], o) * 3.0;
        let q = Tensor::randn([b, nq, h, HEAD_DIM], o) * 1.5;
        let v = Tensor::randn([b, nk, h, HEAD_DIM], o);
        (q, k, v)
    }

    #[test]
    fn the_quantized_function_stays_near_exact_attention() {
        let (q, k, v) = qkv(1, 200, 333, 2, 0);
        let want = sdpa(&q, &k, &v);
        let got = reference(&q, &k, &v, Recipe::plain(Pv::Fp8Pv));
        assert_eq!(got.size(), want.size());
        // INT8 Q·Kᵀ with smoothing perturbs the logits by ~1e-2 (absolute); e4m3 rounding of P and
        // V adds ~2^-5 relative per term, which averages over hundreds of keys. SageAttention2
        // reports ~1-3 % relative L1 at this scale; bound: 4 % relative L2, and not exact.
        let e8 = rel_l2(&got, &want);
        assert!(e8 < 0.04 && e8 > 1e-4, "relative L2 error {e8}");
        // f16 P·V leaves the INT8 logits as the only coarse rounding: at most half the e4m3
        // recipe's error, and still not exact.
        let e16 = rel_l2(&reference(&q, &k, &v, Recipe::plain(Pv::F16Pv)), &want);
        assert!(e16 < e8 / 2.0 && e16 > 1e-5, "f16 P·V {e16} against e4m3 {e8}");
        let qk_only = Emulation { int8_qk: true, ..Default::default() };
        let e_qk = rel_l2(&emulate(&q, &k, &v, qk_only), &want);
        assert!((e_qk - e16).abs() < e16 / 2.0, "f16 rounding adds little to INT8 Q·Kᵀ: {e_qk} vs {e16}");
    }

    #[test]
    fn f16_v_scales_are_powers_of_two_that_keep_bf16_values_exact() {
        let _rng = crate::seeded(3);
        let v = (Tensor::randn([1, 2, 300, HEAD_DIM], (Kind::Float, Device::Cpu)) * 7.3).to_kind(Kind::BFloat16);
        let v = v.to_kind(Kind::Float);
        let vmax = v.abs().amax(2, true);
        let vs = super::f16_v_scale(&vmax);
        // Powers of two, at or above each channel's maximum, below twice it.
        assert!(vs.log2().equal(&vs.log2().round()));
        assert!(bool::try_from(vs.ge_tensor(&vmax).all()).unwrap());
        assert!(bool::try_from(vs.lt_tensor(&(&vmax * 2.0)).all()).unwrap());
        // Every value at least 2^-17 of its channel's scale survives f16 unchanged.
        let scaled = &v / &vs;
        let back = scaled.to_kind(Kind::Half).to_kind(Kind::Float) * &vs;
        let big = scaled.abs().ge(2f64.powi(-17));
        assert!(back.masked_select(&big).equal(&v.masked_select(&big)));
    }

    #[test]
    fn smoothing_k_is_what_keeps_an_offset_channel_harmless() {
        // With a large shared offset in K, per-block INT8 without smoothing would lose the
        // keys' differences; the reference smooths, so the error stays small.
        let (q, mut k, v) = qkv(1, 64, 128, 1, 1);
        k += Tensor::ones([1, 1, 1, HEAD_DIM], (Kind::Float, Device::Cpu)) * 40.0;
        let e = rel_l2(&reference(&q, &k, &v, Recipe::plain(Pv::Fp8Pv)), &sdpa(&q, &k, &v));
        assert!(e < 0.04, "relative L2 error {e}");
    }

    #[test]
    fn smoothing_v_keeps_its_offset_out_of_e4m3_p_v() {
        // Values with a large shared offset per channel (as projections with a bias give): the
        // e4m3 rounding of P then multiplies the offset, unless V is smoothed.
        let (q, k, v) = qkv(1, 300, 300, 2, 6);
        let offset = {
            let _rng = crate::seeded(7);
            Tensor::randn([1, 1, 2, HEAD_DIM], (Kind::Float, Device::Cpu)) * 4.0
        };
        let v = v + offset;
        let want = sdpa(&q, &k, &v);
        let fp8 = Recipe::plain(Pv::Fp8Pv);
        let plain = rel_l2(&reference(&q, &k, &v, fp8), &want);
        let smooth = rel_l2(&reference(&q, &k, &v, Recipe { v_smooth: true, ..fp8 }), &want);
        eprintln!("offset values, e4m3 P·V: {plain:.2e}, V smoothed {smooth:.2e}");
        assert!(smooth < plain / 2.0 && smooth > 1e-4, "V smoothed {smooth} against {plain}");
        // Without an offset, smoothing changes little.
        let (q, k, v) = qkv(1, 300, 300, 2, 6);
        let want = sdpa(&q, &k, &v);
        let plain = rel_l2(&reference(&q, &k, &v, fp8), &want);
        let smooth = rel_l2(&reference(&q, &k, &v, Recipe { v_smooth: true, ..fp8 }), &want);
        assert!((smooth - plain).abs() < plain * 0.2, "no offset: {smooth} against {plain}");
    }

    #[test]
    fn v_statistics_reduce_to_its_mean_and_range() {
        // kv_stats' partials as the kernel writes them, built on the CPU from V [B, N, H, D]
        // split into blocks of keys.
        let _rng = crate::seeded(8);
        let (b, n, h, d, per) = (2i64, 300i64, 3i64, 4i64, 128i64);
        let v = Tensor::randn([b, n, h, d], (Kind::Float, Device::Cpu)) * 2.0 + 5.0;
        let blocks: Vec<Tensor> = (0..(n + per - 1) / per)
            .map(|i| {
                let x = v.narrow(1, i * per, per.min(n - i * per));
                let plane = |t: Tensor| t.unsqueeze(2); // [B, H, 1, D]
                Tensor::stack(
                    &[
                        plane(x.zeros_like().sum_dim_intlist(1, false, Kind::Float)),
                        plane(x.amax(1, false)),
                        plane(x.neg().amax(1, false)),
                        plane(x.sum_dim_intlist(1, false, Kind::Float)),
                    ],
                    0,
                )
            })
            .collect();
        let part = Tensor::cat(&blocks, 3);
        let (none, abs_max) = v_offset_and_range(&part, n, false);
        assert!(none.is_none());
        assert!(abs_max.allclose(&v.abs().amax(1, false), 1e-6, 1e-6, false));
        let (mean, range) = v_offset_and_range(&part, n, true);
        let mean = mean.expect("smoothing has a mean");
        let want_mean = v.mean_dim(1, false, Kind::Float);
        assert!(mean.allclose(&want_mean, 1e-5, 1e-5, false));
        assert!(range.allclose(&(&v - want_mean.unsqueeze(1)).abs().amax(1, false), 1e-5, 1e-5, false));
    }

    #[test]
    fn recipes_name_the_roundings_their_kernels_make() {
        let f16 = Recipe::plain(Pv::F16Pv);
        assert_eq!(f16.with_options("qrow").unwrap(), Recipe { q_per_row: true, ..f16 });
        let all = Recipe { pv: Pv::F16Pv, q_per_row: true, bf16_pv: true, v_smooth: true };
        assert_eq!(f16.with_options(" bf16 , qrow,vmean").unwrap(), all);
        assert!(f16.with_options("lq").unwrap_err().contains("`lq`"), "no kernel computes lq");
        assert!(f16.with_options("qrow,int4").unwrap_err().contains("`int4`"));
        assert_eq!(Emulation::of(Recipe { q_per_row: true, ..f16 }), Emulation::parse("qk,qrow,f16").unwrap());
        assert_eq!(Emulation::of(Recipe { bf16_pv: true, ..f16 }), Emulation::parse("qk,bf16").unwrap());
        let fp8 = Recipe { q_per_row: true, ..Recipe::plain(Pv::Fp8Pv) };
        assert_eq!(Emulation::of(fp8), Emulation::parse("qk,qrow,p,v").unwrap());
        assert_eq!(Emulation::of(Recipe { v_smooth: true, ..fp8 }), Emulation::parse("qk,qrow,p,v,vmean").unwrap());
        // The 16-bit type is the f16 recipe's option only.
        assert_eq!(Emulation::of(Recipe { bf16_pv: true, ..fp8 }), Emulation::of(fp8));
    }

    #[test]
    fn the_shipped_recipes_are_the_gated_ones() {
        // What the quality gate admitted (docs/benchmarks.md): per-row Q scales for both, V
        // smoothed for e4m3 P·V; `none` and an empty list name the plain recipe.
        let fp8 = Recipe::shipped(Pv::Fp8Pv);
        assert_eq!(fp8, Recipe::plain(Pv::Fp8Pv).with_options("qrow,vmean").unwrap());
        assert_eq!(Recipe::shipped(Pv::F16Pv), Recipe::plain(Pv::F16Pv).with_options("qrow").unwrap());
        assert_eq!(Emulation::of(fp8), Emulation::parse("qk,qrow,p,v,vmean").unwrap());
        assert_eq!(Recipe::plain(Pv::F16Pv).with_options("none").unwrap(), Recipe::plain(Pv::F16Pv));
        assert_ne!(Recipe::plain(Pv::Fp8Pv), fp8);
        // Without the research switch (unset in tests), a recipe from its P·V type is the shipped one.
        if std::env::var_os("FASTVIDEO_ATTN8_RECIPE").is_none() {
            assert_eq!(Recipe::from(Pv::Fp8Pv), fp8);
            assert_eq!(Emulation::of(Pv::F16Pv), Emulation::parse("qk,qrow,f16").unwrap());
        }
    }

    #[test]
    fn a_q_scale_per_row_keeps_small_rows_that_a_shared_scale_flattens() {
        // Query rows of very different norms (as after a norm with learned gains): one scale per
        // 16 rows leaves the small rows a few int8 steps, one per row gives each its 127.
        let (q, k, v) = qkv(1, 256, 256, 2, 4);
        let _rng = crate::seeded(5);
        let gains = (Tensor::rand([1, 256, 1, 1], (Kind::Float, Device::Cpu)) * 6.0 - 4.0).exp2();
        let q = q * &gains;
        let want = sdpa(&q, &k, &v);
        let small = gains.lt(0.25).view([-1]).nonzero().view([-1]);
        let on_small = |o: &Tensor| rel_l2(&o.index_select(1, &small), &want.index_select(1, &small));
        let qk = Emulation { int8_qk: true, ..Default::default() };
        let shared = on_small(&emulate(&q, &k, &v, qk));
        let per_row = on_small(&emulate(&q, &k, &v, Emulation { q_per_row: true, ..qk }));
        eprintln!("small rows: per row {per_row:.2e}, per 16 rows {shared:.2e}");
        assert!(per_row < shared / 2.0 && per_row > 1e-6, "small rows: per row {per_row} against per 16 rows {shared}");
        let want = sdpa(&q, &k, &v);
        // P·V's roundings alone: bf16 P keeps 8 significant bits against f16's 11, coarser and
        // still well inside e4m3's 4.
        let pv_only = |e: Emulation| rel_l2(&emulate(&q, &k, &v, e), &want);
        let f16 = pv_only(Emulation { f16_pv: true, ..Default::default() });
        let bf16 = pv_only(Emulation { bf16_p: true, ..Default::default() });
        let fp8 = pv_only(Emulation { fp8_p: true, fp8_v: true, ..Default::default() });
        eprintln!("P·V alone: bf16 {bf16:.2e}, f16 {f16:.2e}, e4m3 {fp8:.2e}");
        assert!(bf16 > 2.0 * f16 && bf16 < fp8 / 2.0, "bf16 P·V {bf16}, f16 {f16}, e4m3 {fp8}");
    }

    #[test]
    fn off_hopper_the_op_is_sdpa() {
        let (q, k, v) = qkv(2, 50, 70, 2, 2);
        let q = q.to_kind(Kind::BFloat16);
        let (k, v) = (k.to_kind(Kind::BFloat16), v.to_kind(Kind::BFloat16));
        assert!(fits(&q, &k, &v).is_none());
        for pv in [Pv::Fp8Pv, Pv::F16Pv] {
            assert!(attention(&q, &k, &v, pv).equal(&sdpa(&q, &k, &v)));
        }
        assert!(!available(Device::Cpu));
    }
}
