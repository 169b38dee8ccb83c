// Paged decode attention: one new query token per request against that request's cached keys and
// values, read in place from a pool of fixed-size blocks through its block table (vLLM's paged
// attention, decode phase). Appended to norms.cu by the host (its bf16/fp16 helpers).
//
// Pool layout, per layer: keys and values `[blocks, kv_heads, block_size, D]`. Inputs: q
// `[B, heads, D]`, table `[B, max_blocks]` int64, lens `[B]` int64 (positions to attend, the new
// one included, already written). Output `[B, heads, D]`.
//
// One thread block per (request, key/value head) serves that head's `heads / kv_heads` query heads
// (grouped-query attention reads each key once for all of them). Each of the 4 warps walks every
// 4th position; a lane holds VEC consecutive channels (D = 32 × VEC), so a key row is one
// coalesced warp load. Scores, the online softmax and the weighted sum are fp32; the warps'
// partial results merge through shared memory at the end. Memory-bound by design: every cached
// byte is read once per step.

#define PD_WARPS 4
#define PD_MAX_GROUPS 8
#define PD_NEG_INF __int_as_float(0xff800000)

template <bool BF, int VEC>
__device__ __forceinline__ void pd_load(const u16* p, float* v) {
    if (VEC == 4) {
        uint2 raw = *reinterpret_cast<const uint2*>(p);
        unsigned int w[2] = {raw.x, raw.y};
#pragma unroll
        for (int i = 0; i < 2; i++) {
            v[2 * i] = Half16<BF>::cvt((u16)(w[i] & 0xffffu));
            v[2 * i + 1] = Half16<BF>::cvt((u16)(w[i] >> 16));
        }
    } else {
#pragma unroll
        for (int i = 0; i < VEC; i++) v[i] = Half16<BF>::cvt(p[i]);
    }
}

template <bool BF, int VEC>
__device__ __forceinline__ void paged_decode(const u16* __restrict__ q, const u16* __restrict__ kp,
                                             const u16* __restrict__ vp, const long long* __restrict__ table,
                                             const long long* __restrict__ lens, u16* __restrict__ out, int heads,
                                             int kv_heads, int block_size, int max_blocks, float scale_log2) {
    const int D = 32 * VEC;
    const int b = blockIdx.x, kvh = blockIdx.y;
    const int groups = heads / kv_heads;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long len = lens[b];
    const long long* row_table = table + (long long)b * max_blocks;

    float qv[PD_MAX_GROUPS][VEC], acc[PD_MAX_GROUPS][VEC], m[PD_MAX_GROUPS], l[PD_MAX_GROUPS];
#pragma unroll
    for (int g = 0; g < PD_MAX_GROUPS; g++) {
        m[g] = PD_NEG_INF;
        l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < VEC; i++) acc[g][i] = 0.f;
        if (g < groups) {
            pd_load<BF, VEC>(q + ((long long)b * heads + kvh * groups + g) * D + lane * VEC, qv[g]);
#pragma unroll
            for (int i = 0; i < VEC; i++) qv[g][i] *= scale_log2;
        }
    }

    for (long long p = warp; p < len; p += PD_WARPS) {
        const long long blk = row_table[p / block_size];
        const long long at = ((blk * kv_heads + kvh) * block_size + p % block_size) * D + lane * VEC;
        float kf[VEC], vf[VEC];
        pd_load<BF, VEC>(kp + at, kf);
        pd_load<BF, VEC>(vp + at, vf);
#pragma unroll
        for (int g = 0; g < PD_MAX_GROUPS; g++) {
            if (g >= groups) break;
            float s = 0.f;
#pragma unroll
            for (int i = 0; i < VEC; i++) s = fmaf(qv[g][i], kf[i], s);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            const float mn = fmaxf(m[g], s);
            const float corr = exp2f(m[g] - mn), e = exp2f(s - mn);
            l[g] = l[g] * corr + e;
#pragma unroll
            for (int i = 0; i < VEC; i++) acc[g][i] = fmaf(e, vf[i], acc[g][i] * corr);
            m[g] = mn;
        }
    }

    __shared__ float sm_m[PD_WARPS][PD_MAX_GROUPS], sm_l[PD_WARPS][PD_MAX_GROUPS];
    __shared__ float sm_acc[PD_WARPS][PD_MAX_GROUPS][32 * VEC];
#pragma unroll
    for (int g = 0; g < PD_MAX_GROUPS; g++) {
        if (g >= groups) break;
        if (lane == 0) {
            sm_m[warp][g] = m[g];
            sm_l[warp][g] = l[g];
        }
#pragma unroll
        for (int i = 0; i < VEC; i++) sm_acc[warp][g][lane * VEC + i] = acc[g][i];
    }
    __syncthreads();
    for (int g = warp; g < groups; g += PD_WARPS) {
        float mx = PD_NEG_INF;
#pragma unroll
        for (int w = 0; w < PD_WARPS; w++) mx = fmaxf(mx, sm_m[w][g]);
        float denom = 0.f, o[VEC];
#pragma unroll
        for (int i = 0; i < VEC; i++) o[i] = 0.f;
#pragma unroll
        for (int w = 0; w < PD_WARPS; w++) {
            // A warp that saw no position has m = -inf: its weight is 0.
            const float f = sm_l[w][g] > 0.f ? exp2f(sm_m[w][g] - mx) : 0.f;
            denom += sm_l[w][g] * f;
#pragma unroll
            for (int i = 0; i < VEC; i++) o[i] += sm_acc[w][g][lane * VEC + i] * f;
        }
        u16* dst = out + ((long long)b * heads + kvh * groups + g) * D + lane * VEC;
#pragma unroll
        for (int i = 0; i < VEC; i++) dst[i] = Half16<BF>::back(o[i] / denom);
    }
}

#define PAGED_DECODE(NAME, BF, VEC)                                                                        \
    extern "C" __global__ void __launch_bounds__(PD_WARPS * 32)                                            \
        NAME(const u16* q, const u16* kp, const u16* vp, const long long* table, const long long* lens,    \
             u16* out, int heads, int kv_heads, int block_size, int max_blocks, float scale_log2) {         \
        paged_decode<BF, VEC>(q, kp, vp, table, lens, out, heads, kv_heads, block_size, max_blocks,       \
                              scale_log2);                                                                \
    }

PAGED_DECODE(paged_decode_bf16_d128, true, 4)
PAGED_DECODE(paged_decode_f16_d128, false, 4)
PAGED_DECODE(paged_decode_bf16_d64, true, 2)
PAGED_DECODE(paged_decode_f16_d64, false, 2)
