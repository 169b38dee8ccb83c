#!/usr/bin/env python3
"""Builds a random-weight Wan2.1-I2V-14B-480P folder in the diffusers layout, for benchmarks only.

    python3 make_wan_i2v.py OUT_DIR [--device cuda|cpu] [--tiny] [--flf2v] [--full-text-encoder] [--seed 0]

The transformer has the published I2V-14B shapes (36 input channels, image_dim 1280,
added_kv_proj_dim 5120; --flf2v adds FLF2V-14B-720P's 514 image positions) and is saved in
bfloat16 (33 GB; float32 would not fit the GPU machine's disk beside everything else). The image
encoder is a ViT-H/14 CLIPVisionModel as Wan's, the VAE Wan 2.1's, the text encoder a 2-layer
UMT5 with umt5-xxl widths, as make_wan13b.py builds them; --full-text-encoder gives it umt5-xxl's
24 layers and 256,384-token embedding (5.7 B params, saved in bfloat16: 11.4 GB), for memory
budgets that must hold what the published folder holds. --tiny: small shapes for a CPU check.
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

TRANSFORMER = dict(patch_size=[1, 2, 2], num_attention_heads=40, attention_head_dim=128, in_channels=36,
                   out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=13824, num_layers=40,
                   cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024,
                   image_dim=1280, added_kv_proj_dim=5120)
CLIP = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
            image_size=224, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-5, projection_dim=1024)
TINY_CLIP = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--flf2v", action="store_true")
    ap.add_argument("--full-text-encoder", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, UMT5Config, UMT5EncoderModel

    t0 = time.perf_counter()
    tmp = a.out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    tcfg, vcfg, ecfg, ccfg = dict(TRANSFORMER), dict(VAE), dict(TEXT), dict(CLIP)
    if a.tiny:
        tcfg.update(TINY_T), vcfg.update(TINY_V), ecfg.update(TINY_E), ccfg.update(TINY_CLIP)
        tcfg["added_kv_proj_dim"] = tcfg["num_attention_heads"] * tcfg["attention_head_dim"]
    tcfg["image_dim"] = ccfg["hidden_size"]
    if a.flf2v:
        tcfg["pos_embed_seq_len"] = 2 * ((ccfg["image_size"] // ccfg["patch_size"]) ** 2 + 1)
    ecfg["vocab_size"] = vocab_size(os.path.join(DEFAULT, "tokenizer", "tokenizer.json"))
    te_dtype = torch.float32
    if a.full_text_encoder:
        ecfg.update(num_layers=24, vocab_size=max(ecfg["vocab_size"], 256384))
        te_dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(a.seed + 1)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    parts = [("transformer", lambda: WanTransformer3DModel(**tcfg), torch.bfloat16),
             ("vae", lambda: AutoencoderKLWan(**vcfg), torch.float32),
             ("text_encoder", lambda: UMT5EncoderModel(UMT5Config(
                 **ecfg, layer_norm_epsilon=1e-6, dropout_rate=0.0, pad_token_id=0, eos_token_id=1)), te_dtype),
             ("image_encoder", lambda: CLIPVisionModel(CLIPVisionConfig(**ccfg)), torch.float32)]
    for name, build, dtype in parts:
        t = time.perf_counter()
        with dev:
            m = build()
        fixed = undegenerate(m, gen)
        m = m.to(dtype).to("cpu")
        m.save_pretrained(os.path.join(tmp, name))
        n = sum(p.numel() for p in m.parameters())
        print(f"make_wan_i2v: {name}: {n / 1e6:.1f} M params ({dtype}), {fixed} constant tensors perturbed, "
              f"{time.perf_counter() - t:.1f} s", flush=True)
        del m
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    side = ccfg["image_size"]
    CLIPImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side}).save_pretrained(
        os.path.join(tmp, "image_processor"))
    shutil.copytree(os.path.join(DEFAULT, "tokenizer"), os.path.join(tmp, "tokenizer"))
    os.makedirs(os.path.join(tmp, "scheduler"))
    shutil.copy(os.path.join(DEFAULT, "scheduler", "scheduler_config.json"), os.path.join(tmp, "scheduler"))
    with open(os.path.join(DEFAULT, "model_index.json")) as f:
        index = json.load(f)
    index["_class_name"] = "WanImageToVideoPipeline"
    index["image_encoder"] = ["transformers", "CLIPVisionModel"]
    index["image_processor"] = ["transformers", "CLIPImageProcessor"]
    with open(os.path.join(tmp, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2)
    with open(os.path.join(tmp, "fastvideo.json"), "w") as f:
        json.dump(RUN, f, indent=2)
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f"make_wan_i2v: {a.out} built in {time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
