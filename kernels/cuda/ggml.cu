// ggml's block formats decoded on the device (GGUF weights kept quantized, dequantized per
// layer just before the GEMM). One thread per 8 consecutive values, which share one block's
// scales; 8 values are stored as one or two 16-byte writes. The arithmetic is the CPU decoder's
// (host/gguf/src/dequant.rs) with the same roundings (`__fmul_rn`/`__fadd_rn`: no contraction
// into FMAs), so both give the same bits.

__device__ __forceinline__ float ggml_h(const unsigned char* b) { return f16_to_f((u16)(b[0] | (b[1] << 8))); }

__device__ __forceinline__ void ggml_scale_min_k4(int j, const unsigned char* q, float* s, float* m) {
    if (j < 4) {
        *s = (float)(q[j] & 63);
        *m = (float)(q[j + 4] & 63);
    } else {
        *s = (float)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// Values `off..off + 8` of one block `b` of type TY (ggml's ids).
template <int TY>
__device__ __forceinline__ void ggml_values8(const unsigned char* b, int off, float* v) {
    if (TY == 8) {  // Q8_0
        float d = ggml_h(b);
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __fmul_rn(d, (float)(signed char)b[2 + off + k]);
    } else if (TY == 2 || TY == 3) {  // Q4_0, Q4_1
        float d = ggml_h(b), m = TY == 3 ? ggml_h(b + 2) : 0.0f, o = TY == 3 ? 0.0f : 8.0f;
        const unsigned char* qs = b + (TY == 3 ? 4 : 2);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int i = off + k;
            int q = i < 16 ? (qs[i] & 0xf) : (qs[i - 16] >> 4);
            v[k] = __fadd_rn(__fmul_rn(d, (float)q - o), m);
        }
    } else if (TY == 6 || TY == 7) {  // Q5_0, Q5_1
        float d = ggml_h(b), m = TY == 7 ? ggml_h(b + 2) : 0.0f, o = TY == 7 ? 0.0f : 16.0f;
        const unsigned char* r = b + (TY == 7 ? 4 : 2);
        unsigned int qh = r[0] | (r[1] << 8) | (r[2] << 16) | ((unsigned int)r[3] << 24);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int i = off + k;
            int q = (i < 16 ? (r[4 + i] & 0xf) : (r[4 + i - 16] >> 4)) | (((qh >> i) & 1) << 4);
            v[k] = __fadd_rn(__fmul_rn(d, (float)q - o), m);
        }
    } else if (TY == 12 || TY == 13) {  // Q4_K, Q5_K
        float d = ggml_h(b), dmin = ggml_h(b + 2);
        const unsigned char* scales = b + 4;
        const unsigned char* qh = b + 16;
        const unsigned char* qs = b + (TY == 13 ? 48 : 16);
        int j = off / 64, w = off % 64, sub = 2 * j + (w >= 32);
        float s, mn;
        ggml_scale_min_k4(sub, scales, &s, &mn);
        float d1 = __fmul_rn(d, s), m1 = __fmul_rn(dmin, mn);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int l = (w % 32) + k;
            int q = w < 32 ? (qs[32 * j + l] & 0xf) : (qs[32 * j + l] >> 4);
            if (TY == 13) q |= ((qh[l] >> sub) & 1) << 4;
            v[k] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        }
    } else if (TY == 14) {  // Q6_K
        const unsigned char* ql = b;
        const unsigned char* qh = b + 128;
        const signed char* sc = (const signed char*)(b + 192);
        float d = ggml_h(b + 208);
        int n = off / 128, p = off % 128, kk = p / 32;
        float s = __fmul_rn(d, (float)sc[8 * n + p / 16]);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int l = p % 32 + k;
            unsigned char lo = ql[64 * n + l + (kk & 1) * 32];
            int q = (kk < 2 ? (lo & 0xf) : (lo >> 4)) | (((qh[32 * n + l] >> (2 * kk)) & 3) << 4);
            v[k] = __fmul_rn(s, (float)(q - 32));
        }
    }
}

template <int TY, int LEN, int BYTES, typename S>
__device__ void ggml_dequant(const unsigned char* q, typename S::T* y, long long groups) {
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (g >= groups) return;
    long long blk = g / (LEN / 8);
    int off = (int)(g % (LEN / 8)) * 8;
    float v[8];
    ggml_values8<TY>(q + blk * BYTES, off, v);
    S::store8(y + g * 8, v);
}

#define GGML_DEQUANT(NAME, TY, LEN, BYTES)                                                                        \
    extern "C" __global__ void ggml_##NAME##_f32(const unsigned char* q, float* y, long long groups) {          \
        ggml_dequant<TY, LEN, BYTES, F32>(q, y, groups);                                                          \
    }                                                                                                             \
    extern "C" __global__ void ggml_##NAME##_bf16(const unsigned char* q, u16* y, long long groups) {           \
        ggml_dequant<TY, LEN, BYTES, Half16<true> >(q, y, groups);                                                \
    }                                                                                                             \
    extern "C" __global__ void ggml_##NAME##_f16(const unsigned char* q, u16* y, long long groups) {            \
        ggml_dequant<TY, LEN, BYTES, Half16<false> >(q, y, groups);                                               \
    }

GGML_DEQUANT(q8_0, 8, 32, 34)
GGML_DEQUANT(q4_0, 2, 32, 18)
GGML_DEQUANT(q4_1, 3, 32, 20)
GGML_DEQUANT(q5_0, 6, 32, 22)
GGML_DEQUANT(q5_1, 7, 32, 24)
GGML_DEQUANT(q4_k, 12, 256, 144)
GGML_DEQUANT(q5_k, 13, 256, 176)
GGML_DEQUANT(q6_k, 14, 256, 210)
