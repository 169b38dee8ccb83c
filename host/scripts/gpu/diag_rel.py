#!/usr/bin/env python3
"""Relative error of our velocity files against diffusers' fp32 and bf16 references:
    diag_rel.py OUT ours_a.safetensors [ours_b.safetensors ...]"""
import sys

from safetensors.torch import load_file

out = sys.argv[1]
r32 = load_file(f"{out}/ref_fp32.safetensors")["velocity"]
r16 = load_file(f"{out}/ref_bf16.safetensors")["velocity"]
print(f"diffusers bf16 vs fp32: {((r16 - r32).norm() / r32.norm()).item():.4e}")
for p in sys.argv[2:]:
    v = load_file(p)["velocity"]
    print(f"{p}: vs fp32 {((v - r32).norm() / r32.norm()).item():.4e}, vs diffusers bf16 {((v - r16).norm() / r16.norm()).item():.4e}")
