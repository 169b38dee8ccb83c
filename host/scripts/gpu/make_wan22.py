#!/usr/bin/env python3
"""Builds a random-weight Wan 2.2 folder in the diffusers layout, for benchmarks only.

    python3 make_wan22.py OUT_DIR --kind a14b|ti2v [--device cuda|cpu] [--tiny] [--seed 0]

--kind a14b: Wan2.2-T2V-A14B, a WanPipeline with two experts (`transformer`, the high-noise one,
and `transformer_2`, the low-noise one), each of Wan2.1-T2V-14B's shapes, boundary_ratio 0.875,
Wan 2.1's VAE and UniPC at flow_shift 12. `transformer_2/` holds its own config.json and links to
`transformer/`'s weight files: both experts have the same weights, which changes nothing a
benchmark measures (speed and memory do not depend on the values; each side still loads two
separate copies onto the device), and the folder is 28 GB instead of 57 (the GPU machine has
64 GiB of disk).
--kind ti2v: Wan2.2-TI2V-5B, a WanPipeline with `expand_timesteps` (text and text+image to video
in one transformer of 48 latent channels), Wan 2.2's residual VAE (z 48, 2x2 patches, 16x in
space, seeded latents_mean/latents_std) and UniPC at flow_shift 5.

Transformers are saved in bfloat16, the VAE and the text encoder in float32; the text encoder is
a 2-layer UMT5 with umt5-xxl widths and the tokenizer models/default's, as make_wan13b.py and
make_wan_i2v.py build them. Each part is initialised on --device directly in its saved dtype
(fast on a GPU: no float32 copy of a 14B model). --tiny: small shapes of the same structure (two
experts, or the residual VAE) for a CPU check.
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_wan13b import DEFAULT, RUN, TEXT, TINY_E, TINY_T, TINY_V, VAE, undegenerate, vocab_size  # noqa: E402

# Wan2.1-T2V-14B's transformer: each of A14B's two experts.
T14B = dict(patch_size=[1, 2, 2], num_attention_heads=40, attention_head_dim=128, in_channels=16,
            out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40,
            cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
T5B = dict(T14B, num_attention_heads=24, ffn_dim=14336, num_layers=30, in_channels=48, out_channels=48)
# Wan 2.2's VAE (TI2V-5B): residual blocks, 2x2 patches (12 channels in and out), z 48, 16x in space.
VAE22 = dict(base_dim=160, decoder_base_dim=256, z_dim=48, dim_mult=[1, 2, 4, 4], num_res_blocks=2,
             temperal_downsample=[False, True, True], is_residual=True, patch_size=2, in_channels=12,
             out_channels=12, scale_factor_spatial=16, scale_factor_temporal=4)
TINY_V22 = dict(base_dim=16, decoder_base_dim=32, num_res_blocks=1)
KINDS = {
    "a14b": dict(transformer=T14B, vae=VAE, flow_shift=12.0, boundary_ratio=0.875,
                 run=dict(RUN, steps=40, guidance_scale=4.0, guidance_scale_2=3.0)),
    "ti2v": dict(transformer=T5B, vae=VAE22, flow_shift=5.0, boundary_ratio=None,
                 run=dict(RUN, height=704, width=1280, num_frames=121, steps=50, guidance_scale=5.0, fps=24)),
}


def link_expert(tmp):
    """transformer_2/: its own config.json, and relative links to transformer/'s weight files
    (shards and their index), which diffusers and our loader both follow."""
    src, dst = os.path.join(tmp, "transformer"), os.path.join(tmp, "transformer_2")
    os.makedirs(dst)
    for f in sorted(os.listdir(src)):
        if f == "config.json":
            shutil.copy(os.path.join(src, f), dst)
        else:
            os.symlink(os.path.join("..", "transformer", f), os.path.join(dst, f))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    k = KINDS[a.kind]
    t0 = time.perf_counter()
    tmp = a.out.rstrip("/") + ".partial"  # built aside, renamed at the end: a folder is whole or absent
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tcfg, vcfg, ecfg = dict(k["transformer"]), dict(k["vae"]), dict(TEXT)
    if a.tiny:
        tcfg.update(TINY_T), ecfg.update(TINY_E)
        vcfg.update(TINY_V22 if vcfg.get("is_residual") else TINY_V)
    ecfg["vocab_size"] = vocab_size(os.path.join(DEFAULT, "tokenizer", "tokenizer.json"))
    gen = torch.Generator().manual_seed(a.seed + 1)
    if vcfg.get("is_residual"):  # the published values are not needed: near 0 and near 1
        vcfg["latents_mean"] = (torch.randn(vcfg["z_dim"], generator=gen) * 0.3).tolist()
        vcfg["latents_std"] = (torch.rand(vcfg["z_dim"], generator=gen) * 0.5 + 0.75).tolist()
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    parts = [("transformer", lambda: WanTransformer3DModel(**tcfg), torch.bfloat16),
             ("vae", lambda: AutoencoderKLWan(**vcfg), torch.float32),
             ("text_encoder", lambda: UMT5EncoderModel(UMT5Config(
                 **ecfg, layer_norm_epsilon=1e-6, dropout_rate=0.0, pad_token_id=0, eos_token_id=1)), torch.float32)]
    for name, build, dtype in parts:
        t = time.perf_counter()
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # parameters are created and initialised in `dtype` on the device
        try:
            with dev:
                m = build()
        finally:
            torch.set_default_dtype(default)
        fixed = undegenerate(m, gen)
        m = m.to(dtype).to("cpu")
        m.save_pretrained(os.path.join(tmp, name))
        n = sum(p.numel() for p in m.parameters())
        print(f"make_wan22: {name}: {n / 1e6:.1f} M params ({dtype}), {fixed} constant tensors perturbed, "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        del m
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    shutil.copytree(os.path.join(DEFAULT, "tokenizer"), os.path.join(tmp, "tokenizer"))
    os.makedirs(os.path.join(tmp, "scheduler"))
    with open(os.path.join(DEFAULT, "scheduler", "scheduler_config.json")) as f:
        sched = json.load(f)
    sched["flow_shift"] = k["flow_shift"]
    with open(os.path.join(tmp, "scheduler", "scheduler_config.json"), "w") as f:
        json.dump(sched, f, indent=2)
    with open(os.path.join(DEFAULT, "model_index.json")) as f:
        index = json.load(f)
    index["_class_name"] = "WanPipeline"
    if k["boundary_ratio"] is not None:
        link_expert(tmp)
        index["transformer_2"] = ["diffusers", "WanTransformer3DModel"]
        index["boundary_ratio"] = k["boundary_ratio"]
        print("make_wan22: transformer_2: links to transformer's weights (same values, a separate copy when loaded)",
              flush=True)
    index["expand_timesteps"] = a.kind == "ti2v"
    with open(os.path.join(tmp, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
    with open(os.path.join(tmp, "fastvideo.json"), "w") as f:
        json.dump(k["run"], f, indent=2)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f"make_wan22: {a.out} ({a.kind}) built in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
