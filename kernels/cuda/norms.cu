// Fused normalization kernels for diffusion transformers (Wan's blocks). Compiled at run time by
// NVRTC, so no CUDA headers: bf16/fp16 conversions are PTX `cvt` instructions.
//
// Every kernel does its arithmetic in fp32 and rounds once when it stores, which is what the
// reference (diffusers) asks for where it upcasts (`x.float()`, FP32LayerNorm, fp32 rotary tables).
// One thread block per row; each thread holds up to MAX_CHUNKS groups of 8 consecutive values in
// registers, so a row is read from memory once. Rows must have D % 8 == 0 and 16-byte aligned
// starts (the host checks and falls back to tch otherwise). The norm kernels come in two builds:
// one chunk per thread (rows up to 8192 wide, every model width here) and `_wide` ones with
// MAX_CHUNKS: registers sized for four chunks cost the narrow rows half their occupancy.

#define MAX_CHUNKS 4

typedef unsigned short u16;

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float bf16_to_f(u16 v) { return __uint_as_float(((unsigned int)v) << 16); }
__device__ __forceinline__ u16 f_to_bf16(float f) {
    u16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}
__device__ __forceinline__ float f16_to_f(u16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
}
__device__ __forceinline__ u16 f_to_f16(float f) {
    u16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
}

// Storage types: 8 values move as one or two 16-byte accesses.
struct F32 {
    typedef float T;
    static __device__ __forceinline__ void load8(const float* p, float* v) {
        float4 a = reinterpret_cast<const float4*>(p)[0];
        float4 b = reinterpret_cast<const float4*>(p)[1];
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    }
    static __device__ __forceinline__ void store8(float* p, const float* v) {
        reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
        reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    static __device__ __forceinline__ float round(float v) { return v; }
};

template <bool BF>
struct Half16 {
    typedef u16 T;
    static __device__ __forceinline__ float cvt(u16 v) { return BF ? bf16_to_f(v) : f16_to_f(v); }
    static __device__ __forceinline__ u16 back(float v) { return BF ? f_to_bf16(v) : f_to_f16(v); }
    static __device__ __forceinline__ void load8(const u16* p, float* v) {
        uint4 raw = reinterpret_cast<const uint4*>(p)[0];
        unsigned int w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = cvt((u16)(w[i] & 0xffffu));
            v[2 * i + 1] = cvt((u16)(w[i] >> 16));
        }
    }
    static __device__ __forceinline__ void store8(u16* p, const float* v) {
        unsigned int w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = (unsigned int)back(v[2 * i]) | ((unsigned int)back(v[2 * i + 1]) << 16);
        reinterpret_cast<uint4*>(p)[0] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    // The value the reference would hold after storing in this type.
    static __device__ __forceinline__ float round(float v) { return cvt(back(v)); }
};

__device__ __forceinline__ void load8_f32(const float* p, float* v) { F32::load8(p, v); }

// Sum over the block; `scratch` holds one float per warp.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    float t = lane < warps ? scratch[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    return t;
}

// x' = x + y * gate (y, gate optional), stored to x_out when y is given; then, when `out` is given,
// out = (LayerNorm(x') [* w + b]) [* (1 + scale) + shift]. gate/scale/shift are fp32 rows indexed
// by batch (row / rows_per_batch) with `mod_stride` elements between batches; w, b are fp32.
// With RMS the norm is an RMSNorm (no mean subtracted: LTX-2's blocks).
template <class S, int CH, bool RMS>
__device__ void norm_modulate(const typename S::T* x, const typename S::T* y, const float* gate,
                              typename S::T* x_out, const float* w, const float* b, const float* scale,
                              const float* shift, long long mod_stride, typename S::T* out,
                              int rows_per_batch, int D, float eps) {
    __shared__ float scratch[32];
    long long row = blockIdx.x;
    long long bidx = row / rows_per_batch;
    const long long base = row * (long long)D;
    float v[CH][8];
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            S::load8(x + base + col, v[c]);
            if (y) {
                float yv[8];
                S::load8(y + base + col, yv);
                float g[8];
                if (gate) {
                    load8_f32(gate + bidx * mod_stride + col, g);
                } else {
#pragma unroll
                    for (int i = 0; i < 8; i++) g[i] = 1.f;
                }
#pragma unroll
                for (int i = 0; i < 8; i++) v[c][i] = S::round(v[c][i] + yv[i] * g[i]);
                S::store8(x_out + base + col, v[c]);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) sum += v[c][i];
        }
    }
    if (!out) return;
    float mean = RMS ? 0.f : block_sum(sum, scratch) / D;
    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float d = v[c][i] - mean;
                sq += d * d;
            }
        }
    }
    float rstd = rsqrtf(block_sum(sq, scratch) / D + eps);
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            float o[8];
#pragma unroll
            for (int i = 0; i < 8; i++) o[i] = (v[c][i] - mean) * rstd;
            if (w) {
                float wv[8], bv[8];
                load8_f32(w + col, wv);
                load8_f32(b + col, bv);
#pragma unroll
                for (int i = 0; i < 8; i++) o[i] = o[i] * wv[i] + bv[i];
            }
            if (scale) {
                float sc[8], sh[8];
                load8_f32(scale + bidx * mod_stride + col, sc);
                load8_f32(shift + bidx * mod_stride + col, sh);
#pragma unroll
                for (int i = 0; i < 8; i++) o[i] = o[i] * (1.f + sc[i]) + sh[i];
            }
            S::store8(out + base + col, o);
        }
    }
}

// out = RMSNorm(x) * w over the row (all heads together, as Wan's `rms_norm_across_heads`), then,
// when cos/sin are given, the rotary embedding on interleaved pairs of each head: cos/sin are
// [rows_per_batch, head_dim / 2] fp32 tables indexed by the row's token. `x` rows are
// `x_stride` elements apart (a slice of a fused QKV projection); `out` is dense.
// blockIdx.y picks one of two independent tensors (q and k share a launch).
template <class S, int CH>
__device__ void rms_rope(const typename S::T* x0, const typename S::T* w0, typename S::T* out0,
                         const typename S::T* x1, const typename S::T* w1, typename S::T* out1,
                         long long x_stride, const float* cosv, const float* sinv, int rows_per_batch,
                         int D, int head_dim, float eps) {
    __shared__ float scratch[32];
    const typename S::T* x = blockIdx.y == 0 ? x0 : x1;
    const typename S::T* w = blockIdx.y == 0 ? w0 : w1;
    typename S::T* out = blockIdx.y == 0 ? out0 : out1;
    long long row = blockIdx.x;
    long long tok = row % rows_per_batch;
    float v[CH][8];
    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            S::load8(x + row * x_stride + col, v[c]);
#pragma unroll
            for (int i = 0; i < 8; i++) sq += v[c][i] * v[c][i];
        }
    }
    // The weights and this token's rotary factors (four pairs per chunk: head_dim is a multiple
    // of 8, so they are consecutive) are loaded before the reduction waits, not after it.
    const int half = head_dim / 2;
    float wv[CH][8], cs[CH][4], sn[CH][4];
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            S::load8(w + col, wv[c]);
            if (cosv) {
                const long long t = tok * half + (col % head_dim) / 2;
                const float4 cv = *reinterpret_cast<const float4*>(cosv + t);
                const float4 sv = *reinterpret_cast<const float4*>(sinv + t);
                cs[c][0] = cv.x, cs[c][1] = cv.y, cs[c][2] = cv.z, cs[c][3] = cv.w;
                sn[c][0] = sv.x, sn[c][1] = sv.y, sn[c][2] = sv.z, sn[c][3] = sv.w;
            }
        }
    }
    float rstd = rsqrtf(block_sum(sq, scratch) / D + eps);
#pragma unroll
    for (int c = 0; c < CH; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            float o[8];
#pragma unroll
            for (int i = 0; i < 8; i++) o[i] = v[c][i] * rstd * wv[c][i];
            if (cosv) {
#pragma unroll
                for (int i = 0; i < 8; i += 2) {
                    float a = o[i], bq = o[i + 1];
                    o[i] = a * cs[c][i / 2] - bq * sn[c][i / 2];
                    o[i + 1] = a * sn[c][i / 2] + bq * cs[c][i / 2];
                }
            }
            S::store8(out + row * (long long)D + col, o);
        }
    }
}

#define NORM_MODULATE(NAME, S, CH, RMS)                                                                   \
    extern "C" __global__ void NAME(const S::T* x, const S::T* y, const float* gate, S::T* x_out,    \
                                    const float* w, const float* b, const float* scale,             \
                                    const float* shift, long long mod_stride, S::T* out,            \
                                    int rows_per_batch, int D, float eps) {                         \
        norm_modulate<S, CH, RMS>(x, y, gate, x_out, w, b, scale, shift, mod_stride, out,            \
                                  rows_per_batch, D, eps);                                           \
    }
#define RMS_ROPE(NAME, S, CH)                                                                         \
    extern "C" __global__ void NAME(const S::T* x0, const S::T* w0, S::T* out0, const S::T* x1,     \
                                    const S::T* w1, S::T* out1, long long x_stride,                 \
                                    const float* cosv, const float* sinv, int rows_per_batch, int D, \
                                    int head_dim, float eps) {                                       \
        rms_rope<S, CH>(x0, w0, out0, x1, w1, out1, x_stride, cosv, sinv, rows_per_batch, D,        \
                        head_dim, eps);                                                              \
    }

NORM_MODULATE(norm_modulate_f32, F32, 1, false)
NORM_MODULATE(norm_modulate_bf16, Half16<true>, 1, false)
NORM_MODULATE(norm_modulate_f16, Half16<false>, 1, false)
NORM_MODULATE(rms_modulate_f32, F32, 1, true)
NORM_MODULATE(rms_modulate_bf16, Half16<true>, 1, true)
NORM_MODULATE(rms_modulate_f16, Half16<false>, 1, true)
RMS_ROPE(rms_rope_f32, F32, 1)
RMS_ROPE(rms_rope_bf16, Half16<true>, 1)
RMS_ROPE(rms_rope_f16, Half16<false>, 1)
NORM_MODULATE(norm_modulate_f32_wide, F32, MAX_CHUNKS, false)
NORM_MODULATE(norm_modulate_bf16_wide, Half16<true>, MAX_CHUNKS, false)
NORM_MODULATE(norm_modulate_f16_wide, Half16<false>, MAX_CHUNKS, false)
NORM_MODULATE(rms_modulate_f32_wide, F32, MAX_CHUNKS, true)
NORM_MODULATE(rms_modulate_bf16_wide, Half16<true>, MAX_CHUNKS, true)
NORM_MODULATE(rms_modulate_f16_wide, Half16<false>, MAX_CHUNKS, true)
RMS_ROPE(rms_rope_f32_wide, F32, MAX_CHUNKS)
RMS_ROPE(rms_rope_bf16_wide, Half16<true>, MAX_CHUNKS)
RMS_ROPE(rms_rope_f16_wide, Half16<false>, MAX_CHUNKS)

// RMSNorm across all heads · weight (LTX-2's `rms_norm_across_heads`), then the rotate-half
// rotary embedding with angles of its own for every head (LTX-2's "split" layout: the frequencies
// run across the whole width, so head h takes angles [h·half, (h+1)·half) of the row's table
// `[rows_per_batch, D / 2]` fp32, indexed by the row's token). Each thread holds 8 consecutive
// values; its partner half sits `half / 8` lanes away in the same warp (head_dim a power of two
// from 16 to 256, D a multiple of 256 so every lane of every warp is live for the shuffles).
// x rows are `x_stride` apart, out is dense; blockIdx.y picks q or k (same tokens, same table).
template <class S>
__device__ void rms_rope_split(const typename S::T* x0, const typename S::T* w0, typename S::T* out0,
                               const typename S::T* x1, const typename S::T* w1, typename S::T* out1,
                               long long x_stride, const float* cosv, const float* sinv,
                               int rows_per_batch, int D, int head_dim, float eps) {
    __shared__ float scratch[32];
    const typename S::T* x = blockIdx.y == 0 ? x0 : x1;
    const typename S::T* w = blockIdx.y == 0 ? w0 : w1;
    typename S::T* out = blockIdx.y == 0 ? out0 : out1;
    const long long row = blockIdx.x;
    const long long tok = row % rows_per_batch;
    const int col = threadIdx.x * 8;
    float v[8], wv[8];
    S::load8(x + row * x_stride + col, v);
    S::load8(w + col, wv);
    const int half = head_dim / 2;
    const int head = col / head_dim, j = col % head_dim;
    const long long t = tok * (long long)(D / 2) + (long long)head * half + (j % half);
    const float4 c0 = *reinterpret_cast<const float4*>(cosv + t);
    const float4 c1 = *reinterpret_cast<const float4*>(cosv + t + 4);
    const float4 s0 = *reinterpret_cast<const float4*>(sinv + t);
    const float4 s1 = *reinterpret_cast<const float4*>(sinv + t + 4);
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) sq += v[i] * v[i];
    const float rstd = rsqrtf(block_sum(sq, scratch) / D + eps);
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = v[i] * rstd * wv[i];
    float p[8];
    const int lanes = half / 8;
#pragma unroll
    for (int i = 0; i < 8; i++) p[i] = __shfl_xor_sync(0xffffffffu, v[i], lanes);
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    const float sign = j < half ? -1.f : 1.f;
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = v[i] * c[i] + sign * p[i] * s[i];
    S::store8(out + row * (long long)D + col, o);
}

#define RMS_ROPE_SPLIT(NAME, S)                                                                        \
    extern "C" __global__ void NAME(const S::T* x0, const S::T* w0, S::T* out0, const S::T* x1,      \
                                    const S::T* w1, S::T* out1, long long x_stride,                  \
                                    const float* cosv, const float* sinv, int rows_per_batch, int D,  \
                                    int head_dim, float eps) {                                        \
        rms_rope_split<S>(x0, w0, out0, x1, w1, out1, x_stride, cosv, sinv, rows_per_batch, D,       \
                          head_dim, eps);                                                             \
    }

RMS_ROPE_SPLIT(rms_rope_split_f32, F32)
RMS_ROPE_SPLIT(rms_rope_split_bf16, Half16<true>)
RMS_ROPE_SPLIT(rms_rope_split_f16, Half16<false>)

// Per-head RMSNorm · weight, then the rotate-half rotary embedding (Qwen/Cosmos3 layout: the
// head's first and second halves are the pairs, angles from fp32 tables `[row, head_dim / 2]`),
// for q and k heads read in place from a fused projection. head_dim 128: sixteen threads hold one
// head (eight values each, one half-warp), so the norm's sum and the rotation's partner values
// move by shuffles, not shared memory. One block per token row; `heads` heads, the first
// `q_heads` take `wq`, the rest `wk`. Computed in fp32, rounded once into the dense output.
template <class S>
__device__ void head_rms_rope(const typename S::T* x, long long x_stride, const typename S::T* wq,
                              const typename S::T* wk, int q_heads, typename S::T* out, const float* cosv,
                              const float* sinv, float eps) {
    const int head = threadIdx.x >> 4, lane = threadIdx.x & 15;
    const long long row = blockIdx.x;
    const int D = 128, half = 64;
    const int col = lane * 8;
    float v[8];
    S::load8(x + row * x_stride + (long long)head * D + col, v);
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) sq += v[i] * v[i];
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
    float w[8];
    S::load8((head < q_heads ? wq : wk) + col, w);
    const float rstd = rsqrtf(sq / D + eps);
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = v[i] * rstd * w[i];
    float p[8];
#pragma unroll
    for (int i = 0; i < 8; i++) p[i] = __shfl_xor_sync(0xffffffffu, v[i], 8);
    const int f = col % half;
    const float4 c0 = *reinterpret_cast<const float4*>(cosv + row * half + f);
    const float4 c1 = *reinterpret_cast<const float4*>(cosv + row * half + f + 4);
    const float4 s0 = *reinterpret_cast<const float4*>(sinv + row * half + f);
    const float4 s1 = *reinterpret_cast<const float4*>(sinv + row * half + f + 4);
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
    const float s[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
    const float sign = col < half ? -1.f : 1.f;
    float o[8];
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = v[i] * c[i] + sign * p[i] * s[i];
    S::store8(out + row * (long long)(blockDim.x >> 4) * D + (long long)head * D + col, o);
}

#define HEAD_RMS_ROPE(NAME, S)                                                                         \
    extern "C" __global__ void NAME(const S::T* x, long long x_stride, const S::T* wq, const S::T* wk, \
                                    int q_heads, S::T* out, const float* cosv, const float* sinv,      \
                                    float eps) {                                                       \
        head_rms_rope<S>(x, x_stride, wq, wk, q_heads, out, cosv, sinv, eps);                          \
    }

HEAD_RMS_ROPE(head_rms_rope_f32, F32)
HEAD_RMS_ROPE(head_rms_rope_bf16, Half16<true>)
HEAD_RMS_ROPE(head_rms_rope_f16, Half16<false>)

// SwiGLU's product: out = silu(gate) · up, gate and up read from one fused projection row
// (`[gate | up]`, `inner` each), computed in fp32 and rounded once. Eight values per thread.
template <class S>
__device__ void silu_mul(const typename S::T* x, typename S::T* out, long long rows, int inner) {
    const long long groups = (long long)inner / 8;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * groups) return;
    const long long row = i / groups, col = (i % groups) * 8;
    float g[8], u[8], o[8];
    S::load8(x + row * 2 * inner + col, g);
    S::load8(x + row * 2 * inner + inner + col, u);
#pragma unroll
    for (int k = 0; k < 8; k++) o[k] = g[k] / (1.f + expf(-g[k])) * u[k];
    S::store8(out + row * inner + col, o);
}

#define SILU_MUL(NAME, S)                                                                         \
    extern "C" __global__ void NAME(const S::T* x, S::T* out, long long rows, int inner) {         \
        silu_mul<S>(x, out, rows, inner);                                                         \
    }

SILU_MUL(silu_mul_f32, F32)
SILU_MUL(silu_mul_bf16, Half16<true>)
SILU_MUL(silu_mul_f16, Half16<false>)
