#!/usr/bin/env python3
"""Builds a random-weight Wan2.1-T2V-1.3B folder in the diffusers layout, for benchmarks only.

    python3 make_wan13b.py OUT_DIR [--device cuda|cpu] [--tiny] [--seed 0]

Shapes follow the published Wan2.1-T2V-1.3B config; the text encoder is a 2-layer UMT5 with
umt5-xxl widths (the benchmark times the encoder but does not need 24 layers of weights) and
the word-level tokenizer of models/default. Weights are built on --device (fast on a GPU) and
saved as float32 CPU tensors. --tiny builds a 2-layer, width-64 model for checking on a CPU.
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULT = os.path.join(ROOT, "models", "default")

TRANSFORMER = dict(patch_size=[1, 2, 2], num_attention_heads=12, attention_head_dim=128, in_channels=16,
                   out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
                   cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
# AutoencoderKLWan's class defaults are Wan2.1's VAE, latents_mean/latents_std included.
VAE = dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
TEXT = dict(d_model=4096, num_layers=2, num_heads=64, d_kv=64, d_ff=10240, relative_attention_num_buckets=32,
            relative_attention_max_distance=128, feed_forward_proj="gated-gelu", dense_act_fn="gelu_new")
TINY_T = dict(num_attention_heads=2, attention_head_dim=32, text_dim=64, freq_dim=64, ffn_dim=128, num_layers=2)
TINY_V = dict(base_dim=16, num_res_blocks=1)
TINY_E = dict(d_model=64, num_heads=4, d_kv=16, d_ff=128)
RUN = {"height": 480, "width": 832, "num_frames": 81, "steps": 50, "guidance_scale": 5.0, "fps": 16,
       "max_sequence_length": 512, "description": "random weights: benchmark only"}


@torch.no_grad()
def undegenerate(model, gen):
    """Class inits leave some tensors constant (norm weights of ones, zero biases). A constant
    tensor hides bugs that ignore it (a missing bias, a norm weight applied to the wrong axis),
    so parity would prove less: add N(0, 0.02) noise to every constant parameter."""
    n = 0
    for p in model.parameters():
        if p.numel() > 1 and bool((p == p.flatten()[0]).all()):
            p.add_(torch.randn(p.shape, generator=gen, device="cpu").to(p.device, p.dtype) * 0.02)
            n += 1
    return n


def vocab_size(tokenizer_json):
    with open(tokenizer_json) as f:
        tok = json.load(f)
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    t0 = time.perf_counter()
    tmp = a.out.rstrip("/") + ".partial"  # built aside, renamed at the end: a folder is whole or absent
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tcfg, vcfg, ecfg = dict(TRANSFORMER), dict(VAE), dict(TEXT)
    if a.tiny:
        tcfg.update(TINY_T), vcfg.update(TINY_V), ecfg.update(TINY_E)
    ecfg["vocab_size"] = vocab_size(os.path.join(DEFAULT, "tokenizer", "tokenizer.json"))
    gen = torch.Generator().manual_seed(a.seed + 1)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    parts = [("transformer", lambda: WanTransformer3DModel(**tcfg)),
             ("vae", lambda: AutoencoderKLWan(**vcfg)),
             ("text_encoder", lambda: UMT5EncoderModel(UMT5Config(
                 **ecfg, layer_norm_epsilon=1e-6, dropout_rate=0.0, pad_token_id=0, eos_token_id=1)))]
    for name, build in parts:
        t = time.perf_counter()
        with dev:  # parameters are created and initialized on the device
            m = build()
        fixed = undegenerate(m, gen)
        m = m.to("cpu")  # built in float32 (the default dtype); saved from CPU
        m.save_pretrained(os.path.join(tmp, name))
        n = sum(p.numel() for p in m.parameters())
        print(f"make_wan13b: {name}: {n / 1e6:.1f} M params, {fixed} constant tensors perturbed, "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        del m
    shutil.copytree(os.path.join(DEFAULT, "tokenizer"), os.path.join(tmp, "tokenizer"))
    os.makedirs(os.path.join(tmp, "scheduler"))
    shutil.copy(os.path.join(DEFAULT, "scheduler", "scheduler_config.json"), os.path.join(tmp, "scheduler"))
    shutil.copy(os.path.join(DEFAULT, "model_index.json"), tmp)
    with open(os.path.join(tmp, "fastvideo.json"), "w") as f:
        json.dump(RUN, f, indent=2)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f"make_wan13b: {a.out} built in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
