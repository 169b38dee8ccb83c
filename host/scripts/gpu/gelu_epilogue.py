"""The FFN's GELU in cuBLASLt's epilogue (`torch._addmm_activation`) against the GEMM and a
separate GELU pass, at Wan2.1-1.3B's FFN shape on the GPU: error against float32 and time.
(An earlier in-model attempt moved the model's output 0.176 from float32: docs/benchmarks.md.)
Run on the GPU machine: python3 host/scripts/gpu/gelu_epilogue.py
"""

import torch
import torch.nn.functional as F


def timed(fn, runs=20):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(runs):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / runs


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def main():
    torch.manual_seed(0)
    for rows in (32760, 65520):
        x = torch.randn(rows, 1536, device="cuda").to(torch.bfloat16)
        w = (torch.randn(8960, 1536, device="cuda") * 0.03).to(torch.bfloat16)
        b = (torch.randn(8960, device="cuda") * 0.1).to(torch.bfloat16)
        ref = F.gelu(torch.addmm(b.float(), x.float(), w.float().t()), approximate="tanh")
        unfused = lambda: F.gelu(torch.addmm(b, x, w.t()), approximate="tanh")  # noqa: E731
        fused = lambda: torch._addmm_activation(b, x, w.t(), use_gelu=True)  # noqa: E731
        eu, ef = rel(unfused(), ref), rel(fused(), ref)
        tu, tf, tg = timed(unfused), timed(fused), timed(lambda: torch.addmm(b, x, w.t()))
        print(f"rows {rows}: error vs fp32 unfused {eu:.2e} fused {ef:.2e}; "
              f"GEMM {tg:.3f} ms, GEMM + GELU {tu:.3f} ms, fused {tf:.3f} ms")
        # The model's layout: x from a [1, rows, 1536] activation, weight [8960, 1536].
        x3 = x.view(1, rows, 1536)
        f3 = torch._addmm_activation(b, x3.reshape(rows, 1536), w.t(), use_gelu=True)
        print(f"  through a 3-D view: error {rel(f3, ref):.2e}")
        # Larger pre-activations (a random-weight model's may be), and a weight stored
        # transposed (non-contiguous [8960, 1536] view).
        for scale in (10.0, 100.0):
            xs = (x.float() * scale).to(torch.bfloat16)
            r = F.gelu(torch.addmm(b.float(), xs.float(), w.float().t()), approximate="tanh")
            print(f"  x x{scale:g}: error fused {rel(torch._addmm_activation(b, xs, w.t(), use_gelu=True), r):.2e}"
                  f" unfused {rel(F.gelu(torch.addmm(b, xs, w.t()), approximate='tanh'), r):.2e}")
        wt = w.t().contiguous().t()
        print(f"  weight stored transposed: error {rel(torch._addmm_activation(b, x, wt.t(), use_gelu=True), ref):.2e}")


if __name__ == "__main__":
    main()
