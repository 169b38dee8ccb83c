#!/usr/bin/env python3
"""Checks, on the GPU, two libtorch ops our bf16 transformer relies on, at Wan-1.3B's shapes:
the GELU(tanh) GEMM epilogue (`torch._addmm_activation`) and SDPA with q/k/v that are slices of
one packed projection (rows 3·D apart) rather than dense tensors. Prints relative errors."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

torch.manual_seed(0)
dev, bf = "cuda", torch.bfloat16
N, D, H, FF = 32760, 1536, 12, 8960


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


x = torch.randn(N, D, device=dev, dtype=bf)
w = torch.randn(FF, D, device=dev, dtype=bf) * 0.02
b = torch.randn(FF, device=dev, dtype=bf) * 0.02
ref = F.gelu(F.linear(x.float(), w.float(), b.float()), approximate="tanh")
print("addmm_activation gelu vs fp32 gelu_tanh(linear):", rel(torch._addmm_activation(b, x, w.t(), use_gelu=True), ref))
print("bf16 gelu_tanh(linear) vs fp32:                  ", rel(F.gelu(F.linear(x, w, b), approximate="tanh"), ref))
print("addmm_activation vs exact-erf gelu (fp32):       ", rel(torch._addmm_activation(b, x, w.t(), use_gelu=True), F.gelu(F.linear(x.float(), w.float(), b.float()))))

packed = torch.randn(1, N, 3 * D, device=dev, dtype=bf)
q, k, v = (packed[..., i * D:(i + 1) * D].view(1, N, H, -1).transpose(1, 2) for i in range(3))
qd, kd, vd = (t.contiguous() for t in (q, k, v))
ref = F.scaled_dot_product_attention(qd.float(), kd.float(), vd.float())
for name, backend in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION), ("default", None)]:
    ctx = sdpa_kernel(backend) if backend else torch.autocast("cuda", enabled=False)
    with ctx:
        dense = F.scaled_dot_product_attention(qd.transpose(1, 2).contiguous().transpose(1, 2), kd, vd)
        sliced = F.scaled_dot_product_attention(q, k, v)
        dense_qk_sliced_v = F.scaled_dot_product_attention(qd, kd, v)
    print(f"sdpa {name}: dense {rel(dense, ref):.3e}  packed q/k/v {rel(sliced, ref):.3e}  packed v only {rel(dense_qk_sliced_v, ref):.3e}")
