// 8-bit attention for Hopper (sm_90a), SageAttention2-class: Q·Kᵀ in INT8 with K smoothed (its
// mean over keys removed, which softmax ignores) and Q, K quantized per block; P·V in FP8 (e4m3)
// with V quantized per channel; float32 softmax, and P·V accumulated in the tensor cores' float32
// accumulators (the running output is rescaled in registers between tiles). Compiled on its own
// for compute_90a (wgmma); the host takes this path only on compute capability 9.0 with head dim
// 128 and otherwise runs SDPA.
//
// Each CTA holds 128 query rows (two warpgroups of 64 that run on their own) and walks the keys
// 128 at a time through a ring of shared-memory stages that a third, producer warpgroup fills
// with bulk copies as the two release them. Per
// tile a warpgroup runs the softmax while the previous tile's P·V runs, rescales its output,
// issues the next tile's Q·Kᵀ and this tile's P·V, and waits for the Q·Kᵀ only.
//
// Layouts (all written by the quantize kernels in attention8_quant.cu, padded with zeros):
//   qi  int8 [B, H, Nq_pad, 128], one scale per `q_rows` rows (16: one warp's rows, or 1:
//       each row its own; qs [B, H, Nq_pad / q_rows]) with the softmax scale and log2(e) folded in;
//   ki  int8 [B, H, Nk_pad, 128], one scale per 64-key tile (ks [B, H, Nk_pad/64]);
//   vt  e4m3 [B, H, Nk_pad/64, 128, 64]: V transposed tile by tile, keys permuted within each 32
//       (`perm32`) so that the Q·Kᵀ accumulator registers are the P·V A-fragment as they stand;
//       one scale per channel (vs [B, H, 128]), and V's mean over the keys subtracted per
//       channel first when the recipe smooths V (vm [B, H, 128], added to the output; else null);
//   or, for the 16-bit P·V variants (attention_int8_f16_sm90, attention_int8_bf16_sm90), V in
//       f16 or bf16 [B, H, Nk_pad/64, 128, 64] (quant_v_16t), keys in order, scaled by a
//       per-channel power of two vs (exact in either type unless V is smoothed).
// Every tile is stored swizzled as shared memory holds it, so one bulk copy moves it.

// Tuning switches (compile-time; `FASTVIDEO_ATTN8_DEFINES="POLY_NUM=4,PINGPONG=1"` sets them for
// an experiment, the defaults are what was measured fastest):
//   POLY_NUM  of every 16 exponentials of the softmax, how many run on the FMA and integer
//             pipes (`ex2_fma`) instead of the MUFU unit, whose 16 per clock per SM bound it;
//   PINGPONG  the two warpgroups take turns issuing their tile's GEMMs (named barriers), so one's
//             softmax runs while the other's GEMMs do, as FlashAttention-3 schedules them.
#ifndef POLY_NUM
#define POLY_NUM 0
#endif
#ifndef PINGPONG
#define PINGPONG 0
#endif
//   STAGES    key/value tiles in flight (the host reserves shared memory for up to 6);
#ifndef STAGES
#define STAGES 5
#endif
//   STAGES_F16  the same for the f16 P·V variant, whose V tiles are twice as large.
#ifndef STAGES_F16
#define STAGES_F16 4
#endif
//   PRODUCER  a third warpgroup (384 threads) refills each stage as soon as the eight consumer
//             warps have released it; 0: thread 0 refills the stage two tiles back between its
//             own GEMMs, stalling its warpgroup (4-7 % slower). `setmaxnreg` moves the producer's
//             registers to the consumers (FlashAttention-3's layout). The host launches as many
//             threads as the kernel's `__launch_bounds__` declare.
#ifndef PRODUCER
#define PRODUCER 1
#endif
#define ATTN_THREADS (PRODUCER ? 384 : 256)
// Research switches (wrong or no output; host/scripts/gpu/results/2026-12-04-attention8-trace/):
//   ABLATE    1 drops the exponentials (the FMA stays), 2 the P·V GEMMs, 4 the Q·Kᵀ GEMMs, 8
//             the f16 conversions of P (bit slicing instead), 16 the key/value loads after the
//             first STAGES tiles (the stages are reused as they are); bits combine, to see what
//             bounds a tile. Without Q·Kᵀ the compiler folds most of the softmax away (its input is
//             undefined), so 4 says little about the softmax.
//   TRACE     CTA (TRACE_CTA, 0, 0)'s two warpgroup leaders write clock() at eight points of
//             each of the first 64 tiles as u32 [warpgroup][tile][event] over the start of
//             `out`, whose first 128 rows are then not written (the bench dumps them;
//             host/scripts/gpu/attention8_trace.py reads them).
#ifndef ABLATE
#define ABLATE 0
#endif
#ifndef TRACE
#define TRACE 0
#endif
#ifndef TRACE_CTA
#define TRACE_CTA 100
#endif

#define HEAD_DIM 128
#define BLOCK_M 128  // query rows per CTA: two warpgroups of 64
#define BLOCK_N 64   // keys per quantization block (K scales, Vᵀ tiles)

typedef unsigned int u32;
typedef unsigned long long u64;

// Key order within a 32-key block as the P fragment holds it: logical position L (the k index of
// the A fragment) carries the probability of key perm32(L).
__device__ __forceinline__ int perm32(int L) {
    int hi = L >> 4, c = (L & 15) >> 2, i = L & 3;
    return 16 * hi + 2 * c + (i & 1) + 8 * (i >> 1);
}

__device__ __forceinline__ float bf16_to_f32(unsigned short b) { return __uint_as_float(((u32)b) << 16); }

__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ unsigned short e4m3x2_pack(float lo, float hi) {
    unsigned short r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ u32 f16x2_pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ u32 bf16x2_pack(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Two floats as a 16-bit pair of the P·V variant's type.
template <bool BF16>
__device__ __forceinline__ u32 half2_pack(float lo, float hi) {
    return BF16 ? bf16x2_pack(lo, hi) : f16x2_pack(lo, hi);
}

// ---------------------------------------------------------------------------------------------
// The attention kernel.

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

// Shared-memory barriers: the bulk copies complete on `full` ones (by bytes), the warps release a
// stage on `empty` ones.
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// One contiguous global → shared copy by the async proxy (no tensor map: the quantize kernels
// wrote every tile already swizzled), completing `bytes` on `bar`.
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

// A K-major shared-memory matrix descriptor: swizzle 1 = 128 B rows, 2 = 64 B rows; the stride
// byte offset is 8 rows.
__device__ __forceinline__ u64 smem_desc(u32 addr, u32 sbo, u32 swizzle) {
    u64 d = (u64)((addr & 0x3FFFF) >> 4);
    d |= (u64)1 << 16;
    d |= (u64)((sbo >> 4) & 0x3FFF) << 32;
    d |= (u64)swizzle << 62;
    return d;
}

// S[64] (+)= Q(64×32, smem) · K(128 keys × 32, smem)ᵀ, INT8 in, INT32 out.
__device__ __forceinline__ void wgmma_qk(int (&s)[64], u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p;\n}\n"
        : "+r"(s[0]), "+r"(s[1]), "+r"(s[2]), "+r"(s[3]), "+r"(s[4]), "+r"(s[5]), "+r"(s[6]), "+r"(s[7]), "+r"(s[8]), "+r"(s[9]), "+r"(s[10]), "+r"(s[11]), "+r"(s[12]), "+r"(s[13]), "+r"(s[14]), "+r"(s[15]), "+r"(s[16]), "+r"(s[17]), "+r"(s[18]), "+r"(s[19]), "+r"(s[20]), "+r"(s[21]), "+r"(s[22]), "+r"(s[23]), "+r"(s[24]), "+r"(s[25]), "+r"(s[26]), "+r"(s[27]), "+r"(s[28]), "+r"(s[29]), "+r"(s[30]), "+r"(s[31]), "+r"(s[32]), "+r"(s[33]), "+r"(s[34]), "+r"(s[35]), "+r"(s[36]), "+r"(s[37]), "+r"(s[38]), "+r"(s[39]), "+r"(s[40]), "+r"(s[41]), "+r"(s[42]), "+r"(s[43]), "+r"(s[44]), "+r"(s[45]), "+r"(s[46]), "+r"(s[47]), "+r"(s[48]), "+r"(s[49]), "+r"(s[50]), "+r"(s[51]), "+r"(s[52]), "+r"(s[53]), "+r"(s[54]), "+r"(s[55]), "+r"(s[56]), "+r"(s[57]), "+r"(s[58]), "+r"(s[59]), "+r"(s[60]), "+r"(s[61]), "+r"(s[62]), "+r"(s[63])
        : "l"(da), "l"(db), "r"(accumulate));
}

// The 64 float32 accumulators of a warpgroup's m64n128 wgmma: the register list and the operands.
#define O_REGISTERS                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "            \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "            \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define O_ACCUMULATORS(o) \
    "+f"(o[0]), "+f"(o[1]), "+f"(o[2]), "+f"(o[3]), "+f"(o[4]), "+f"(o[5]), "+f"(o[6]), "+f"(o[7]), \
    "+f"(o[8]), "+f"(o[9]), "+f"(o[10]), "+f"(o[11]), "+f"(o[12]), "+f"(o[13]), "+f"(o[14]), "+f"(o[15]), \
    "+f"(o[16]), "+f"(o[17]), "+f"(o[18]), "+f"(o[19]), "+f"(o[20]), "+f"(o[21]), "+f"(o[22]), "+f"(o[23]), \
    "+f"(o[24]), "+f"(o[25]), "+f"(o[26]), "+f"(o[27]), "+f"(o[28]), "+f"(o[29]), "+f"(o[30]), "+f"(o[31]), \
    "+f"(o[32]), "+f"(o[33]), "+f"(o[34]), "+f"(o[35]), "+f"(o[36]), "+f"(o[37]), "+f"(o[38]), "+f"(o[39]), \
    "+f"(o[40]), "+f"(o[41]), "+f"(o[42]), "+f"(o[43]), "+f"(o[44]), "+f"(o[45]), "+f"(o[46]), "+f"(o[47]), \
    "+f"(o[48]), "+f"(o[49]), "+f"(o[50]), "+f"(o[51]), "+f"(o[52]), "+f"(o[53]), "+f"(o[54]), "+f"(o[55]), \
    "+f"(o[56]), "+f"(o[57]), "+f"(o[58]), "+f"(o[59]), "+f"(o[60]), "+f"(o[61]), "+f"(o[62]), "+f"(o[63])

// O[64] (+)= P(64×32, registers) · Vt(128 channels × 32 keys, smem)ᵀ, e4m3 in, float32 out.
__device__ __forceinline__ void wgmma_pv(float (&o)[64], const u32 (&a)[4], u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        O_REGISTERS
        "{%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : O_ACCUMULATORS(o)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

// O[64] (+)= P(64×16, registers) · Vt(128 channels × 16 keys, smem)ᵀ, f16 or bf16 in, float32
// out.
template <bool BF16>
__device__ __forceinline__ void wgmma_pv16(float (&o)[64], const u32 (&a)[4], u64 db, int accumulate) {
    if constexpr (BF16) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
            O_REGISTERS
            "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
            : O_ACCUMULATORS(o)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
    } else {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            O_REGISTERS
            "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
            : O_ACCUMULATORS(o)
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
    }
}

#define Q_BYTES (BLOCK_M * HEAD_DIM)   // 16 KiB
#define TILE_N 128                     // keys per step: two 64-key quantization blocks
#define K_BYTES (TILE_N * HEAD_DIM)    // 16 KiB
#define V_BYTES (HEAD_DIM * TILE_N)    // 16 KiB: two 64-key Vᵀ tiles
// Q, the key stages, room to align to 1 KiB, the barriers.
#define SMEM_BYTES (Q_BYTES + STAGES * (K_BYTES + V_BYTES) + 1024 + 8 * (2 * STAGES + 1))

// log2(448): P is computed as 2^(x − max + log2 448), already on e4m3's range.
#define LOG2_P_SCALE 8.807354922057604f

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// 2^x without the MUFU unit: round(x) through the float adder's rounding (x + 1.5·2^23), a
// quadratic for 2^f on f in [-0.5, 0.5] (0.17 % relative error, fitted for relative error; P is
// then rounded to e4m3, whose steps are 6 %), and round(x) added to the exponent field. The low
// bits of x + 1.5·2^23 are round(x), and shifting them by 23 drops the constant.
__device__ __forceinline__ float ex2_fma(float x) {
    x = fmaxf(x, -100.f);
    const float t = __fadd_rn(x, 12582912.f);
    const float f = __fsub_rn(x, __fsub_rn(t, 12582912.f));
    const float p = fmaf(fmaf(0.23842874f, f, 0.70344827f), f, 1.00044319f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}

// Named barriers 1 and 2: warpgroup w may issue its GEMMs once barrier 1 + w completes (its own
// 128 threads syncing, the other warpgroup's 128 arriving).
__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

// The Q·Kᵀ accumulators' starting value (below) and, as a float, 1.5·2^23.
#define ACC_BIAS 0x4B400000
#define ACC_BIAS_F 12582912.f
// A maximum of biased accumulators as the integer Q·Kᵀ, in float (exact: |s| < 2^22).
__device__ __forceinline__ float unbias(int m) { return __int_as_float(m) - ACC_BIAS_F; }
__device__ __forceinline__ void reset_acc(int (&s)[64]) {
#pragma unroll
    for (int i = 0; i < 64; i++) s[i] = ACC_BIAS;
}

// Online softmax of one 128-key tile for this thread's two rows (r0 and r0 + 8). `s` is Q·Kᵀ in
// int32; row r's first 32 registers (n8 chunks 0-7, keys 0-63) dequantize with `f[r][0]`, the
// rest with `f[r][1]` (one K scale per 64 keys times the row's Q scale; the softmax scale is in
// Q's). With one Q scale per 16 rows both rows' factors are equal and the result is as it was
// with one pair. With MASK, keys from
// `valid` on are left out. P·448 comes out as four e4m3 A fragments (the accumulator registers
// of chunks 4kk..4kk+3 in perm32 order), with the running maxima and sums updated and the factors
// (a0, a1) that rescale the running output. int → float is folded into the one FMA that scales
// and shifts each logit: Q·Kᵀ accumulates onto 0x4B400000 (1.5·2^23 as a float) instead of zero,
// so each accumulator read as a float is 1.5·2^23 + s, exact for |s| < 2^22 (INT8 Q·Kᵀ over 128
// channels stays below 2^21) and off by ~1e-4 of a log2 unit after the FMA subtracts the
// constant. (Adding the bias per logit instead cost an integer add on each one's dependency
// chain: the e4m3 kernel is 1.5-2 % faster this way, the f16 one the same.) The accumulators
// are reset to the bias once read, for the next tile's Q·Kᵀ.
template <bool MASK, int PK, bool BF16>
__device__ __forceinline__ void softmax_tile(int (&s)[64], const float (&f)[2][2], int valid, int lane, float& m0,
                                             float& m1, float& l0, float& l1, float& a0, float& a1, u32 (&p)[PK][4]) {
    auto keep = [&](int i) { return !MASK || 8 * (i >> 2) + 2 * (lane & 3) + (i & 1) < valid; };
    const int lowest = -2147483647 - 1;
    int mx[4] = {lowest, lowest, lowest, lowest};  // row 0 low half, row 1 low, row 0 high, row 1 high
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int k = (i & 2 ? 1 : 0) + (i >= 32 ? 2 : 0);
        mx[k] = max(mx[k], keep(i) ? s[i] : lowest);
    }
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
#pragma unroll
        for (int k = 0; k < 4; k++) mx[k] = max(mx[k], __shfl_xor_sync(0xffffffffu, mx[k], o2));
    }
    // Halves with no valid key give a huge negative maximum, never the row's.
    const float mx0 = fmaxf(m0, fmaxf(unbias(mx[0]) * f[0][0], unbias(mx[2]) * f[0][1]));
    const float mx1 = fmaxf(m1, fmaxf(unbias(mx[1]) * f[1][0], unbias(mx[3]) * f[1][1]));
    a0 = ex2(m0 - mx0);
    a1 = ex2(m1 - mx1);
    m0 = mx0;
    m1 = mx1;
    const float c0l = fmaf(ACC_BIAS_F, f[0][0], mx0 - LOG2_P_SCALE), c1l = fmaf(ACC_BIAS_F, f[1][0], mx1 - LOG2_P_SCALE);
    const float c0h = fmaf(ACC_BIAS_F, f[0][1], mx0 - LOG2_P_SCALE), c1h = fmaf(ACC_BIAS_F, f[1][1], mx1 - LOG2_P_SCALE);
    // 2^x per k32 fragment (n8 chunks 4kk..4kk+3), packed at once, so few values are live.
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        float x[16];
#pragma unroll
        for (int e = 0; e < 16; e++) {
            const int i = 16 * kk + e;
            const bool hi = i >= 32, r1 = (i & 2) != 0;
            const float fi = f[r1 ? 1 : 0][hi ? 1 : 0];
            const float c = r1 ? (hi ? c1h : c1l) : (hi ? c0h : c0l);
            const float arg = fmaf(__int_as_float(s[i]), fi, -c);
            x[e] = (ABLATE & 1) ? arg : e < POLY_NUM ? ex2_fma(arg) : ex2(arg);
            if (MASK && !keep(i)) x[e] = 0.f;
            if (r1)
                sum1 += x[e];
            else
                sum0 += x[e];
        }
        if constexpr (PK == 4) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int c0i = 8 * half, c1i = c0i + 4;  // offsets of the two chunks within x
#pragma unroll
                for (int r = 0; r < 2; r++)
                    p[kk][2 * half + r] = e4m3x2_pack(x[c0i + 2 * r], x[c0i + 2 * r + 1]) |
                                          (e4m3x2_pack(x[c1i + 2 * r], x[c1i + 2 * r + 1]) << 16);
            }
        } else {
            // 16-bit k16 A fragments are the accumulator registers in order: (row 0, row 1) of
            // chunk 2kk', then of chunk 2kk' + 1.
#pragma unroll
            for (int r = 0; r < 8; r++)
                p[2 * kk + r / 4][r % 4] = (ABLATE & 8) ? (__float_as_uint(x[2 * r]) >> 16) |
                                                              (__float_as_uint(x[2 * r + 1]) & 0xffff0000u)
                                                        : half2_pack<BF16>(x[2 * r], x[2 * r + 1]);
        }
    }
    l0 = fmaf(l0, a0, sum0);
    l1 = fmaf(l1, a1, sum1);
    reset_acc(s);
}

// out bf16 [B, N, H, 128] with element strides (ob, on, oh). Two warpgroups of 64 query rows each
// run through the key tiles on their own (no block-wide barrier per tile), bounded by the
// STAGES-deep ring of K/V tiles that the producer warpgroup refills as both release them. F16:
// P·V in 16 bits (twice the bytes of V per tile, so fewer stages) instead of e4m3, in bf16 with
// BF16 and else in f16.
template <bool F16, bool BF16>
__device__ __forceinline__ void attention_body(const signed char* qi, const float* qs, int q_rows,
                                               const signed char* ki, const float* ks, const unsigned char* vt,
                                               const float* vs, const float* vm, unsigned short* out, long long ob,
                                               long long on,
                                               long long oh, int nq, int nq_pad, int nk, int nk_pad, int heads) {
    constexpr int STAGES_ = F16 ? STAGES_F16 : STAGES;
    constexpr u32 V_BYTES_ = F16 ? 2 * V_BYTES : V_BYTES;
    constexpr int PK = F16 ? 8 : 4;  // A fragments of P per tile
    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const u32 sq = base;
    const u32 sk0 = base + Q_BYTES;
    const u32 sv0 = sk0 + STAGES_ * K_BYTES;
    const u32 full0 = sv0 + STAGES_ * V_BYTES_;  // STAGES_ barriers, then STAGES_ `empty`, then Q's
    const u32 empty0 = full0 + 8 * STAGES_;
    const u32 qbar = empty0 + 8 * STAGES_;

    const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
    const int mblk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const long long bh = (long long)b * heads + h;
    const signed char* qg = qi + (bh * nq_pad + (long long)mblk * BLOCK_M) * HEAD_DIM;
    const signed char* kg = ki + bh * nk_pad * HEAD_DIM;
    const unsigned char* vg = vt + bh * HEAD_DIM * nk_pad * (F16 ? 2 : 1);  // bytes per element
    const float* ksh = ks + bh * (nk_pad / BLOCK_N);
    const int tiles = nk_pad / TILE_N;

    auto load_tile = [&](int t) {
        const int st = t % STAGES_;
        if ((ABLATE & 16) && t >= STAGES_) {  // the stage keeps its old tile
            mbar_arrive(full0 + 8 * st);
            return;
        }
        mbar_expect_tx(full0 + 8 * st, K_BYTES + V_BYTES_);
        bulk_load(sk0 + st * K_BYTES, kg + (long long)t * K_BYTES, K_BYTES, full0 + 8 * st);
        bulk_load(sv0 + st * V_BYTES_, vg + (long long)t * V_BYTES_, V_BYTES_, full0 + 8 * st);
    };
    if (tid == 0) {
        for (int i = 0; i < STAGES_; i++) {
            mbar_init(full0 + 8 * i, 1);
            mbar_init(empty0 + 8 * i, 8);  // one arrival per warp
        }
        mbar_init(qbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
        mbar_expect_tx(qbar, Q_BYTES);
        bulk_load(sq, qg, Q_BYTES, qbar);
        for (int t = 0; t < STAGES_ && t < tiles; t++) load_tile(t);
    }
    if (PRODUCER && tid >= 256) {  // the producer warpgroup: refills, nothing else
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (tid == 256) {
            for (int t = STAGES_; t < tiles; t++) {
                mbar_wait(empty0 + 8 * (t % STAGES_), ((t - STAGES_) / STAGES_) & 1);
                load_tile(t);
            }
        }
        return;
    }
    if (PRODUCER) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");

    const int row0 = mblk * BLOCK_M + wg * 64 + warp * 16 + (lane >> 2);  // and row0 + 8
    // This thread's rows' Q scales (q_rows divides 16, so both rows are inside the Q tile).
    const float* qsh = qs + bh * (nq_pad / q_rows);
    const float q0 = qsh[row0 / q_rows], q1 = qsh[(row0 + 8) / q_rows];
    const u64 dq = smem_desc(sq + wg * 64 * 128, 1024, 1);

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.f;
    float m0 = -__int_as_float(0x7f800000), m1 = -__int_as_float(0x7f800000), l0 = 0.f, l1 = 0.f;
    int s[64];
    reset_acc(s);
    u32 pa[PK][4], pb[PK][4];  // P of this tile, and of the previous one while its P·V runs
    float klo = ksh[0], khi = ksh[1];
    mbar_wait(qbar, 0);

    auto issue_qk = [&](int j) {
        mbar_wait(full0 + 8 * (j % STAGES_), (j / STAGES_) & 1);
        const u64 dk = smem_desc(sk0 + (j % STAGES_) * K_BYTES, 1024, 1);
        wgmma_fence();
        if (!(ABLATE & 4)) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_qk(s, dq + 2 * kk, dk + 2 * kk, 1);  // onto the bias
        }
        wgmma_commit();
    };
    // Tile j's P·V added to the output in the tensor cores' float32 accumulators.
    auto issue_pv = [&](int j, const u32 (&p)[PK][4]) {
        const u32 v = sv0 + (j % STAGES_) * V_BYTES_;
        wgmma_fence();
        if (ABLATE & 2) {
        } else if constexpr (F16) {
            // Each 64-key half: four k16 steps of 32 bytes along its 128-byte rows.
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
                wgmma_pv16<BF16>(o, p[kk], smem_desc(v + (kk >> 2) * (V_BYTES_ / 2), 1024, 1) + 2 * (kk & 3), 1);
        } else {
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wgmma_pv(o, p[kk], smem_desc(v + (kk >> 1) * (V_BYTES_ / 2), 512, 2) + 2 * (kk & 1), 1);
        }
        wgmma_commit();
    };
    auto softmax = [&](int j, u32 (&p)[PK][4], float& a0, float& a1) {
        const float f[2][2] = {{q0 * klo, q0 * khi}, {q1 * klo, q1 * khi}};
        if (j + 1 < tiles) {  // the next tile's scales; their latency hides behind this softmax
            klo = ksh[2 * j + 2];
            khi = ksh[2 * j + 3];
        }
        const int valid = nk - j * TILE_N;
        if (valid >= TILE_N)
            softmax_tile<false, PK, BF16>(s, f, valid, lane, m0, m1, l0, l1, a0, a1, p);
        else
            softmax_tile<true, PK, BF16>(s, f, valid, lane, m0, m1, l0, l1, a0, a1, p);
    };
    // Tile j: its softmax runs while tile j-1's P·V does; then the output is rescaled and tile
    // j's P·V issued after tile j+1's Q·Kᵀ (when `next`), which the next step waits for.
    const bool tracer = TRACE && blockIdx.x == TRACE_CTA && h == 0 && b == 0 && (tid & 127) == 0;
    auto mark = [&](int j, int e) {
        if (tracer && j < 64) {
            u32 c;
            asm volatile("mov.u32 %0, %%clock;" : "=r"(c)::"memory");
            reinterpret_cast<u32*>(out)[(wg * 64 + j) * 8 + e] = c;
        }
    };
    auto step = [&](int j, u32 (&p)[PK][4], bool next) {
        float a0, a1;
        mark(j, 0);
        softmax(j, p, a0, a1);
        mark(j, 1);
        wgmma_wait0();  // tile j-1's P·V
        mark(j, 2);
        if (j > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((j - 1) % STAGES_));  // done with tile j-1
#pragma unroll
        for (int i = 0; i < 64; i += 4) {
            o[i] *= a0;
            o[i + 1] *= a0;
            o[i + 2] *= a1;
            o[i + 3] *= a1;
        }
        mark(j, 3);
        // Refill the stage of tile j-2 (both warpgroups are most likely past it) with the tile
        // STAGES_ after it.
        if (!PRODUCER && tid == 0 && j >= 2 && j - 2 + STAGES_ < tiles) {
            mbar_wait(empty0 + 8 * ((j - 2) % STAGES_), ((j - 2) / STAGES_) & 1);
            load_tile(j - 2 + STAGES_);
        }
        if (PINGPONG) bar_sync(1 + wg);
        mark(j, 4);
        if (next) issue_qk(j + 1);
        mark(j, 5);
        issue_pv(j, p);
        // The other warpgroup's turn (warpgroup 1 primed warpgroup 0's first, so it gives one
        // fewer: every barrier sees as many arrivals as syncs).
        if (PINGPONG && !(wg == 1 && j == tiles - 1)) bar_arrive(2 - wg);
        mark(j, 6);
        if (next) wgmma_wait1();  // tile j+1's Q·Kᵀ (the older group)
        mark(j, 7);
    };
    issue_qk(0);
    wgmma_wait0();
    if (PINGPONG && wg == 1) bar_arrive(1);  // warpgroup 0 goes first
    int j = 0;
    for (; j + 2 < tiles; j += 2) {
        step(j, pa, true);
        step(j + 1, pb, true);
    }
    if (j + 1 < tiles) {
        step(j, pa, true);
        step(j + 1, pb, false);
    } else {
        step(j, pa, false);
    }
    wgmma_wait0();

#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
    }
    const float inv0 = 1.f / l0, inv1 = 1.f / l1;  // l sums P·448, as O does
    const float* vsh = vs + bh * HEAD_DIM;
    const float* vmh = vm ? vm + bh * HEAD_DIM : nullptr;
    if (TRACE && mblk == 0) return;  // the trace's rows
#pragma unroll
    for (int jn = 0; jn < 16; jn++) {
        const int d = 8 * jn + 2 * (lane & 3);
        const float v0 = vsh[d], v1 = vsh[d + 1];
        const float u0 = vmh ? vmh[d] : 0.f, u1 = vmh ? vmh[d + 1] : 0.f;  // P·(V − vm) / l + vm
        if (row0 < nq) {
            u32 w = (u32)f32_to_bf16(fmaf(o[4 * jn] * inv0, v0, u0)) |
                    ((u32)f32_to_bf16(fmaf(o[4 * jn + 1] * inv0, v1, u1)) << 16);
            *reinterpret_cast<u32*>(out + b * ob + (long long)row0 * on + h * oh + d) = w;
        }
        if (row0 + 8 < nq) {
            u32 w = (u32)f32_to_bf16(fmaf(o[4 * jn + 2] * inv1, v0, u0)) |
                    ((u32)f32_to_bf16(fmaf(o[4 * jn + 3] * inv1, v1, u1)) << 16);
            *reinterpret_cast<u32*>(out + b * ob + (long long)(row0 + 8) * on + h * oh + d) = w;
        }
    }
}

#define ATTENTION_PARAMS                                                                             \
    const signed char *qi, const float *qs, int q_rows, const signed char *ki, const float *ks,       \
        const unsigned char *vt, const float *vs, const float *vm, unsigned short *out, long long ob, \
        long long on, long long oh, int nq, int nq_pad, int nk, int nk_pad, int heads
#define ATTENTION_ARGS qi, qs, q_rows, ki, ks, vt, vs, vm, out, ob, on, oh, nq, nq_pad, nk, nk_pad, heads

extern "C" __global__ void __launch_bounds__(ATTN_THREADS, 1) attention_int8_fp8_sm90(ATTENTION_PARAMS) {
    attention_body<false, false>(ATTENTION_ARGS);
}

// vt: f16 [B, H, Nk_pad/64, 128, 64] from quant_v_16t.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS, 1) attention_int8_f16_sm90(ATTENTION_PARAMS) {
    attention_body<true, false>(ATTENTION_ARGS);
}

// vt: bf16 [B, H, Nk_pad/64, 128, 64] from quant_v_16t.
extern "C" __global__ void __launch_bounds__(ATTN_THREADS, 1) attention_int8_bf16_sm90(ATTENTION_PARAMS) {
    attention_body<true, true>(ATTENTION_ARGS);
}
