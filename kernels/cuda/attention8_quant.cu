// Quantization for the 8-bit attention kernels (attention8.cu, whose helpers and constants this
// file uses: the host compiles the two as one module, that file first). Each writes its tensor
// in the layout the attention kernel's shared memory holds, so one bulk copy moves a tile.

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// One CTA (128 threads) per 64 rows of one head: int8 values with one scale per `rows`-row group
// (1, 16 or 64; absmax / 127, times `mul`), after subtracting `mean` × `mean_mul` ([B, H, 128]
// float32, or null) per channel. x is bf16 [B, N, H, 128] with element strides (sb, sn, sh); out
// int8 [B, H, n_pad, 128], n_pad a multiple of 64. (One CTA per 16-row group of Q took 111 µs
// at 32,760 tokens on the H200, against ~73 now: too little work per CTA for its barrier.)
#define QUANT_ROWS 64
extern "C" __global__ void __launch_bounds__(128) quant_int8_rows(const unsigned short* x, long long sb,
                                                                 long long sn, long long sh, int n, int n_pad,
                                                                 int heads, int rows, const float* mean,
                                                                 float mean_mul, float mul, signed char* out,
                                                                 float* scale) {
    __shared__ float red[4][4];  // [warp][group]
    const int blk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int groups = rows == 16 ? 4 : 1;  // of 16 or 64 rows, per CTA (rows > 1)
    // Chunk c of thread t: row 8c + t / 16 of the block, channels col..col+7: rows 16g..16g+15
    // (group g of 16) are chunks 2g and 2g+1; one row's chunks are those of 16 adjacent lanes.
    float v[8][8];
    float m[4] = {0.f, 0.f, 0.f, 0.f};
    float mc[8];  // each chunk's own maximum, for one scale per row
    float mu[8];
    const int col = (threadIdx.x % 16) * 8;  // every chunk of a thread has the same columns
#pragma unroll
    for (int i = 0; i < 8; i++)
        mu[i] = mean ? mean[((long long)b * heads + h) * HEAD_DIM + col + i] * mean_mul : 0.f;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int row = blk * QUANT_ROWS + c * 8 + threadIdx.x / 16;
        const int g = groups == 4 ? c / 2 : 0;
        mc[c] = 0.f;
        if (row < n) {
            uint4 raw = *reinterpret_cast<const uint4*>(x + b * sb + (long long)row * sn + h * sh + col);
            const unsigned short* e = reinterpret_cast<const unsigned short*>(&raw);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                v[c][i] = bf16_to_f32(e[i]) - mu[i];
                mc[c] = fmaxf(mc[c], fabsf(v[c][i]));
            }
            m[g] = fmaxf(m[g], mc[c]);
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[c][i] = 0.f;
        }
    }
    float inv[8];  // per chunk
    if (rows == 1) {
        // Each row's maximum over its 16 lanes (shuffles within each half of the warp).
#pragma unroll
        for (int c = 0; c < 8; c++) {
#pragma unroll
            for (int o = 1; o < 16; o <<= 1) mc[c] = fmaxf(mc[c], __shfl_xor_sync(0xffffffffu, mc[c], o));
            const float s = fmaxf(mc[c], 1e-20f) / 127.f;
            inv[c] = 1.f / s;
            if (threadIdx.x % 16 == 0)
                scale[((long long)b * heads + h) * n_pad + blk * QUANT_ROWS + c * 8 + threadIdx.x / 16] = s * mul;
        }
    } else {
#pragma unroll
        for (int g = 0; g < 4; g++) {
            m[g] = warp_max(m[g]);
            if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5][g] = m[g];
        }
        __syncthreads();
        float ig[4];
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const float s = fmaxf(fmaxf(fmaxf(red[0][g], red[1][g]), fmaxf(red[2][g], red[3][g])), 1e-20f) / 127.f;
            ig[g] = 1.f / s;
            if (threadIdx.x == 0 && g < groups)
                scale[((long long)b * heads + h) * (n_pad / rows) + blk * groups + g] = s * mul;
        }
#pragma unroll
        for (int c = 0; c < 8; c++) inv[c] = ig[groups == 4 ? c / 2 : 0];
    }
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int row = blk * QUANT_ROWS + c * 8 + threadIdx.x / 16;
        const float iv = inv[c];
        u32 w[2] = {0u, 0u};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = __float2int_rn(v[c][i] * iv);
            q = max(-127, min(127, q));
            w[i >> 2] |= ((u32)(q & 0xff)) << (8 * (i & 3));
        }
        // Stored as the attention kernel's shared memory holds it (128-byte swizzle: the
        // 16-byte chunk c of row r at chunk c ^ (r % 8)), so one bulk copy moves a tile.
        long long o = (((long long)b * heads + h) * n_pad + row) * HEAD_DIM + ((((col >> 4) ^ (row & 7))) << 4) +
                      (col & 15);
        *reinterpret_cast<uint2*>(out + o) = make_uint2(w[0], w[1]);
    }
}

// Per-channel statistics for K's smoothing and V's scales (and V's smoothing) in one pass over
// both: one CTA (128 threads) per STAT_ROWS keys of one head writes the block's sums of K, maxima
// of V and of −V, and sums of V into part [4, B, H, nblk, 128] float32 (in that order: the
// maxima of ±V side by side, so one reduction over both planes gives max |V|); the host
// reduces the blocks in a fixed order (deterministic, unlike atomics). k, v bf16 [B, N, H, 128]
// with element strides.
#define STAT_ROWS 256
extern "C" __global__ void __launch_bounds__(128) kv_stats(const unsigned short* k, long long ksb, long long ksn,
                                                          long long ksh, const unsigned short* v, long long vsb,
                                                          long long vsn, long long vsh, int n, int heads, int nblk,
                                                          float* part) {
    __shared__ float red[4][8][HEAD_DIM];
    const int blk = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int col = (threadIdx.x % 16) * 8, lane_row = threadIdx.x / 16;  // 8 rows at a time
    float sum[8], mx[8], mn[8], vsum[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        sum[i] = vsum[i] = 0.f;
        mx[i] = -3.0e38f;
        mn[i] = -3.0e38f;
    }
    const int end = min(n, (blk + 1) * STAT_ROWS);
#pragma unroll 4
    for (int row = blk * STAT_ROWS + lane_row; row < end; row += 8) {
        const uint4 kr = *reinterpret_cast<const uint4*>(k + b * ksb + (long long)row * ksn + h * ksh + col);
        const uint4 vr = *reinterpret_cast<const uint4*>(v + b * vsb + (long long)row * vsn + h * vsh + col);
        const unsigned short* ke = reinterpret_cast<const unsigned short*>(&kr);
        const unsigned short* ve = reinterpret_cast<const unsigned short*>(&vr);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float x = bf16_to_f32(ve[i]);
            sum[i] += bf16_to_f32(ke[i]);
            mx[i] = fmaxf(mx[i], x);
            mn[i] = fmaxf(mn[i], -x);
            vsum[i] += x;
        }
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        red[0][lane_row][col + i] = sum[i];
        red[1][lane_row][col + i] = mx[i];
        red[2][lane_row][col + i] = mn[i];
        red[3][lane_row][col + i] = vsum[i];
    }
    __syncthreads();
    const int d = threadIdx.x;
    float s = 0.f, m = -3.0e38f, mi = -3.0e38f, vs = 0.f;
#pragma unroll
    for (int r = 0; r < 8; r++) {
        s += red[0][r][d];
        m = fmaxf(m, red[1][r][d]);
        mi = fmaxf(mi, red[2][r][d]);
        vs += red[3][r][d];
    }
    const long long o = (((long long)b * heads + h) * nblk + blk) * HEAD_DIM + d;
    const long long plane = (long long)gridDim.z * heads * nblk * HEAD_DIM;
    part[o] = s;
    part[plane + o] = m;
    part[2 * plane + o] = mi;
    part[3 * plane + o] = vs;
}

// The bf16 V rows of one 64-key tile of one head into shared memory (zeros past n), for the V
// quantize kernels below, which read it back column by column.
__device__ __forceinline__ void load_v_tile(const unsigned short* v, long long sb, long long sn, long long sh, int n,
                                            int t, int h, int b, unsigned short (&tile)[BLOCK_N][HEAD_DIM + 8]) {
    for (int idx = threadIdx.x; idx < BLOCK_N * 16; idx += 128) {
        int r = idx / 16, col = (idx % 16) * 8;
        int key = t * BLOCK_N + r;
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (key < n) raw = *reinterpret_cast<const uint4*>(v + b * sb + (long long)key * sn + h * sh + col);
        *reinterpret_cast<uint4*>(&tile[r][col]) = raw;
    }
    __syncthreads();
}

// One CTA (128 threads, one per channel) per 64-key tile of one head: (V − vm) / vs in e4m3,
// transposed tile by tile with keys permuted within each 32 (see perm32). `vs` and `vm` (V's
// mean over the keys when the recipe smooths V, else null) are [B, H, 128].
extern "C" __global__ void __launch_bounds__(128) quant_v_fp8t(const unsigned short* v, long long sb, long long sn,
                                                              long long sh, int n, int n_pad, int heads,
                                                              const float* vs, const float* vm, unsigned char* out) {
    __shared__ unsigned short tile[BLOCK_N][HEAD_DIM + 8];
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    load_v_tile(v, sb, sn, sh, n, t, h, b, tile);
    const int d = threadIdx.x;
    const float inv = 1.f / vs[((long long)b * heads + h) * HEAD_DIM + d];
    const float mu = vm ? vm[((long long)b * heads + h) * HEAD_DIM + d] : 0.f;
    u32 w[BLOCK_N / 4];
#pragma unroll
    for (int L = 0; L < BLOCK_N; L += 2) {
        int k0 = (L & ~31) + perm32(L & 31), k1 = (L & ~31) + perm32((L + 1) & 31);
        // Keys past n stay 0, not −vm (P is 0 there, but 0 · inf would not be).
        const float x0 = t * BLOCK_N + k0 < n ? (bf16_to_f32(tile[k0][d]) - mu) * inv : 0.f;
        const float x1 = t * BLOCK_N + k1 < n ? (bf16_to_f32(tile[k1][d]) - mu) * inv : 0.f;
        u32 pair = e4m3x2_pack(x0, x1);
        if ((L & 2) == 0)
            w[L >> 2] = pair;
        else
            w[L >> 2] |= pair << 16;
    }
    // Tile by tile ([B, H, n_pad / 64, 128, 64]), each as the attention kernel's shared memory
    // holds it (64-byte swizzle: chunk c of row d at chunk c ^ ((d / 2) % 4)).
    unsigned char* dst = out + ((((long long)b * heads + h) * (n_pad / BLOCK_N) + t) * HEAD_DIM + d) * BLOCK_N;
#pragma unroll
    for (int i = 0; i < BLOCK_N / 16; i++)
        reinterpret_cast<uint4*>(dst)[i ^ ((d >> 1) & 3)] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
}

// The 16-bit P·V variants' V: one CTA (128 threads, one per channel) per 64-key tile of one
// head, (V − vm) / vs in f16 (or bf16 with `as_bf16`; vs is a power of two at or above the
// channel's max |V − vm|: in range; without smoothing, vm null, also exact), transposed tile
// by tile
// ([B, H, n_pad / 64, 128, 64]) in key order, as the k16 A fragments of P need no permutation.
// Each 128-byte row (one channel's 64 keys) is stored with the 128-byte swizzle.
extern "C" __global__ void __launch_bounds__(128) quant_v_16t(const unsigned short* v, long long sb, long long sn,
                                                             long long sh, int n, int n_pad, int heads,
                                                             const float* vs, const float* vm, int as_bf16,
                                                             unsigned short* out) {
    __shared__ unsigned short tile[BLOCK_N][HEAD_DIM + 8];
    const int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    load_v_tile(v, sb, sn, sh, n, t, h, b, tile);
    const int d = threadIdx.x;
    const float inv = 1.f / vs[((long long)b * heads + h) * HEAD_DIM + d];
    const float mu = vm ? vm[((long long)b * heads + h) * HEAD_DIM + d] : 0.f;
    u32 w[BLOCK_N / 2];
#pragma unroll
    for (int k = 0; k < BLOCK_N; k += 2) {
        // Keys past n stay 0, not −vm / vs (which f16 may not hold: P is 0 there, but 0 · inf is NaN).
        const int key = t * BLOCK_N + k;
        const float lo = key < n ? (bf16_to_f32(tile[k][d]) - mu) * inv : 0.f;
        const float hi = key + 1 < n ? (bf16_to_f32(tile[k + 1][d]) - mu) * inv : 0.f;
        w[k >> 1] = as_bf16 ? bf16x2_pack(lo, hi) : f16x2_pack(lo, hi);
    }
    unsigned short* dst = out + ((((long long)b * heads + h) * (n_pad / BLOCK_N) + t) * HEAD_DIM + d) * BLOCK_N;
#pragma unroll
    for (int i = 0; i < 8; i++)
        reinterpret_cast<uint4*>(dst)[i ^ (d & 7)] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
}
