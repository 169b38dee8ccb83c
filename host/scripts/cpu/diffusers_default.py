#!/usr/bin/env python3
"""Times diffusers' WanPipeline on the shipped default model on this CPU with the model's own
defaults (fastvideo.json: 20 UniPC steps, guidance 4, 17 frames of 64x64, 16 text tokens), the
same request `fastvideo generate` runs. Prints one JSON object: median seconds per clip and per
phase. Used by cpu_vs_diffusers.sh; needs torch, diffusers, transformers (versions as pinned in
tests/fixtures/requirements.txt)."""
import json
import statistics
import sys
import time

import torch
from diffusers import WanPipeline

model, runs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
cfg = json.load(open(f"{model}/fastvideo.json"))
torch.set_grad_enabled(False)
pipe = WanPipeline.from_pretrained(model, torch_dtype=torch.float32)
pipe.set_progress_bar_config(disable=True)
kw = dict(prompt="a red circle moving left on a white background", negative_prompt="", height=cfg["height"],
          width=cfg["width"], num_frames=cfg["num_frames"], num_inference_steps=cfg["steps"],
          guidance_scale=cfg["guidance_scale"], max_sequence_length=cfg["max_sequence_length"], output_type="np")
times, decode = [], []
orig_decode = pipe.vae.decode


def timed_decode(*a, **k):
    t = time.perf_counter()
    out = orig_decode(*a, **k)
    decode.append(time.perf_counter() - t)
    return out


pipe.vae.decode = timed_decode
for i in range(runs + 1):  # the first is a warm-up
    g = torch.Generator().manual_seed(i)
    t = time.perf_counter()
    pipe(**kw, generator=g)
    if i:
        times.append(time.perf_counter() - t)
print(json.dumps({"clip_s": statistics.median(times), "vae_decode_s": statistics.median(decode[1:]),
                  "threads": torch.get_num_threads(), "runs": runs}))
