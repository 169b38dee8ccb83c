"""The FFN's GELU in cuBLASLt's epilogue (`torch._addmm_activation`) against the GEMM and a
separate GELU pass, at Wan2.1-1.3B's FFN shape on the GPU: error against float32 and time.
(An earlier in-model attempt moved the model's output 0.176 from float32: docs/benchmarks.md.)
Run on the GPU machine: python3 host/scripts/gpu/gelu_epilogue.py [--model DIR]
With --model (a diffusers Wan folder, make_wan13b.py), also on the model's own activations: each
GELU projection's input captured in a bf16 forward at 480x832x81 (fixed seed), the epilogue's
error per call site against float32 and the two ops'; then the whole forward with every
FFN GELU fused (diffusers' text projection runs its GELU as its own module), against the float32 forward.
"""

import argparse
import json
import os

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


def fused_gelu(mod, x):
    s = x.shape
    y = torch._addmm_activation(mod.proj.bias, x.reshape(-1, s[-1]), mod.proj.weight.t(), use_gelu=True)
    return y.view(*s[:-1], y.shape[-1])


@torch.no_grad()
def model_check(folder):
    from diffusers import WanTransformer3DModel
    from diffusers.models.activations import GELU

    tdir = os.path.join(folder, "transformer")
    z = json.load(open(os.path.join(tdir, "config.json")))["in_channels"]
    g = torch.Generator().manual_seed(0)
    x = torch.randn([1, z, 21, 60, 104], generator=g)
    c = torch.randn([1, 512, 4096], generator=g)
    t = torch.tensor([500.0])

    def forward(m, dtype):
        return m(hidden_states=x.to("cuda", dtype), timestep=t.cuda(), encoder_hidden_states=c.to("cuda", dtype),
                 return_dict=False)[0].float()

    torch.backends.cuda.matmul.allow_tf32 = False
    m = WanTransformer3DModel.from_pretrained(tdir, dtype=torch.float32).cuda().eval()
    ref = forward(m, torch.float32)
    del m
    torch.cuda.empty_cache()
    m = WanTransformer3DModel.from_pretrained(tdir, dtype=torch.bfloat16).cuda().eval()
    sites = [(n, mod) for n, mod in m.named_modules() if isinstance(mod, GELU)]
    print(f"model: {len(sites)} GELU projections ({sites[0][0]} ... {sites[-1][0]})")
    stats = []

    def hook(name):
        def f(mod, args, out):
            a = args[0]
            pre = F.linear(a.float(), mod.proj.weight.float(), mod.proj.bias.float())
            r = F.gelu(pre, approximate="tanh")
            fu = fused_gelu(mod, a)
            stats.append((name, a.dtype, tuple(a.shape), a.is_contiguous(), pre.abs().max().item(),
                          rel(out, r), rel(fu, r), bool(torch.isfinite(fu).all())))
        return f

    hs = [mod.register_forward_hook(hook(n)) for n, mod in sites]
    plain = forward(m, torch.bfloat16)
    for h in hs:
        h.remove()
    for n, dt, shape, contig, amax, eu, ef, finite in stats:
        print(f"  {n}: {dt} {shape} contiguous {contig} |pre|max {amax:.3g}: unfused {eu:.2e} fused {ef:.2e}"
              f"{'' if finite else ' NON-FINITE'}")
    orig = GELU.forward
    GELU.forward = lambda mod, h: fused_gelu(mod, h)
    fused = forward(m, torch.bfloat16)
    GELU.forward = orig
    print(f"whole forward vs fp32: two ops {rel(plain, ref):.4f}, epilogue {rel(fused, ref):.4f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    a = ap.parse_args()
    main()
    if a.model:
        model_check(a.model)
