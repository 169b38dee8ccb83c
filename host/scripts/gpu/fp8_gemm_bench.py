"""FP8 GEMMs at Wan's linear shapes on the GPU, to choose how `precision = fast` quantizes: bf16
against e4m3 `torch._scaled_mm` with per-output-channel weight scales and per-token activation
scales, with and without fast accumulation, and what quantizing the activations costs (the
plain torch ops our CPU fallback uses). Also the error of each against the bf16 product.

    python3 host/scripts/gpu/fp8_gemm_bench.py [--tokens 32760] [--json OUT]
"""

import argparse
import json

import torch

E4M3_MAX = 448.0


def quantize_rows(x):
    """x [M, K] -> (e4m3 [M, K], fp32 scales [M, 1]) with each row's absmax at 448."""
    s = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
    return (x.float() / s).to(torch.float8_e4m3fn), s


def timed(fn, runs=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32760)
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = []
    # (in, out) of Wan2.1-1.3B's block linears (dim 1536, ffn 8960) and A14B's (5120, 13824).
    for k, n in [(1536, 1536), (1536, 8960), (8960, 1536), (5120, 5120), (5120, 13824), (13824, 5120)]:
        x = torch.randn(a.tokens, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
        ref = x @ w.t()
        w8, sw = quantize_rows(w)
        x8, sx = quantize_rows(x)
        r = {"m": a.tokens, "k": k, "n": n, "bf16_ms": timed(lambda: x @ w.t())}
        for fast in (False, True):
            out = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw.t(), out_dtype=torch.bfloat16,
                                   use_fast_accum=fast)
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = timed(lambda: torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw.t(), out_dtype=torch.bfloat16,
                                                use_fast_accum=fast))
            r[f"fp8_{'fast' if fast else 'exact'}_accum_ms"] = ms
            r[f"fp8_{'fast' if fast else 'exact'}_accum_rel_err"] = err
        r["quantize_rows_torch_ms"] = timed(lambda: quantize_rows(x))
        rows.append(r)
        print(r, flush=True)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
