#!/usr/bin/env python3
"""diffusers doing what `fastvideo bench` does in one process — bf16 transformer, text encoder
and VAE on the GPU together, a text encode, a forward, a CFG step, a VAE decode — with each
phase's memory read the way the bench reads its own: the caching allocator's cache emptied and
its peaks reset before the phase, max_memory_allocated / max_memory_reserved after it. bench.sh
adds the whole process's nvidia-smi peak. `same_work_*` is the highest over the phases, the
figure beside the bench's `same_work_peak_*` (which leaves out its tiny decoder and previews).

    python3 diffusers_mem.py --model DIR --inputs OUT/inputs.safetensors --out OUT/diffusers_mem.json
"""
import argparse
import json
import os

import torch
from safetensors.torch import load_file

P = argparse.ArgumentParser()
P.add_argument("--model", required=True)
P.add_argument("--inputs", required=True)
P.add_argument("--out", required=True)
A = P.parse_args()

from diffusers import AutoencoderKLWan, WanTransformer3DModel  # noqa: E402
from transformers import UMT5EncoderModel  # noqa: E402

torch.set_grad_enabled(False)
dev, bf = torch.device("cuda"), torch.bfloat16
inp = {k: v.to(dev) for k, v in load_file(A.inputs).items()}
t = WanTransformer3DModel.from_pretrained(os.path.join(A.model, "transformer"), dtype=bf).to(dev).eval()
te = UMT5EncoderModel.from_pretrained(os.path.join(A.model, "text_encoder"), dtype=bf).to(dev).eval()
vae = AutoencoderKLWan.from_pretrained(os.path.join(A.model, "vae"), dtype=bf).to(dev).eval()
ids = torch.ones(1, 512, dtype=torch.long, device=dev)
x, c = inp["latents"].to(bf), inp["context"].to(bf)
ts = inp["timestep"]
phases = []


def phase(name, f):
    """f once, its memory measured alone (as the bench's `phase`)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    out = f()
    torch.cuda.synchronize()
    phases.append({"phase": name, "start_allocated_bytes": start,
                   "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                   "peak_reserved_bytes": torch.cuda.max_memory_reserved()})
    print("diffusers_mem:", phases[-1], flush=True)
    return out


def forward(ctx):
    return t(hidden_states=x, timestep=ts, encoder_hidden_states=ctx, return_dict=False)[0]


def cfg_step():
    cond, uncond = forward(c), forward(torch.zeros_like(c))
    return uncond + (cond - uncond) * 5.0


phase("text_encode", lambda: te(ids, torch.ones_like(ids)).last_hidden_state)
phase("forward", lambda: forward(c))
phase("cfg_step", cfg_step)
phase("vae_decode", lambda: vae.decode(inp["vae_latents"].to(bf)).sample)
r = {"phase_memory": phases,
     "same_work_peak_allocated_bytes": max(p["peak_allocated_bytes"] for p in phases),
     "same_work_peak_reserved_bytes": max(p["peak_reserved_bytes"] for p in phases),
     "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
json.dump(r, open(A.out, "w"))
print("diffusers_mem:", {k: v for k, v in r.items() if k != "phase_memory"})
