// Row-wise FP8 (e4m3) quantization of activations for the scaled GEMM (`precision = fast`),
// appended to norms.cu by the build (it reuses its storage types). One thread block per row, the
// row held in registers: one read of the activations, one write of a byte per value and one float
// scale per row, so that |x| / scale reaches 448 (e4m3's largest finite value) at the row's
// maximum. The GELU variant applies the tanh GELU first, rounded to the activations' dtype as the
// unfused path stores it, and so replaces the FFN's in-place GELU pass as well.

// Max over the block; `scratch` holds one float per warp.
__device__ __forceinline__ float block_max(float v, float* scratch) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    float t = lane < warps ? scratch[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
    return t;
}

// Two floats to two e4m3 bytes (RNE, saturating): `lo` in the low byte.
__device__ __forceinline__ unsigned int e4m3x2(float lo, float hi) {
    unsigned short r = 0;
#if __CUDA_ARCH__ >= 890  // FP8 conversions (and the scaled GEMM) start with Ada/Hopper; the host
                          // never launches these kernels below that.
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
#endif
    return (unsigned int)r;
}

__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
}

template <class S, bool GELU>
__device__ void quantize_rows(const typename S::T* x, unsigned char* out, float* scale, int D) {
    __shared__ float scratch[32];
    const long long base = (long long)blockIdx.x * (long long)D;
    float v[MAX_CHUNKS][8];
    float m = 0.f;
#pragma unroll
    for (int c = 0; c < MAX_CHUNKS; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            S::load8(x + base + col, v[c]);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                if (GELU) v[c][i] = S::round(gelu_tanh(v[c][i]));
                m = fmaxf(m, fabsf(v[c][i]));
            }
        }
    }
    const float s = fmaxf(block_max(m, scratch), 1e-12f) / 448.0f;
#pragma unroll
    for (int c = 0; c < MAX_CHUNKS; c++) {
        int col = (c * blockDim.x + threadIdx.x) * 8;
        if (col < D) {
            unsigned int w[4];
#pragma unroll
            for (int i = 0; i < 4; i++) w[i] = e4m3x2(v[c][2 * i] / s, v[c][2 * i + 1] / s);
            reinterpret_cast<uint2*>(out + base + col)[0] = make_uint2(w[0] | (w[1] << 16), w[2] | (w[3] << 16));
        }
    }
    if (threadIdx.x == 0) scale[blockIdx.x] = s;
}

#define QUANTIZE(name, S, GELU)                                                                   \
    extern "C" __global__ void name(const S::T* x, unsigned char* out, float* scale, int D) {   \
        quantize_rows<S, GELU>(x, out, scale, D);                                                 \
    }
QUANTIZE(quantize_fp8_f32, F32, false)
QUANTIZE(quantize_fp8_bf16, Half16<true>, false)
QUANTIZE(quantize_fp8_f16, Half16<false>, false)
QUANTIZE(gelu_quantize_fp8_f32, F32, true)
QUANTIZE(gelu_quantize_fp8_bf16, Half16<true>, true)
QUANTIZE(gelu_quantize_fp8_f16, Half16<false>, true)
