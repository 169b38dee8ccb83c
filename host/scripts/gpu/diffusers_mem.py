#!/usr/bin/env python3
"""diffusers doing what `fastvideo bench` does in one process — bf16 transformer, text encoder
and VAE on the GPU together, a text encode, a CFG step, a VAE decode — so bench.sh can read both
processes' peak GPU memory the same way (nvidia-smi) and the allocator's own peaks.

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
te(ids, torch.ones_like(ids)).last_hidden_state
x, c = inp["latents"].to(bf), inp["context"].to(bf)
for ctx in (c, torch.zeros_like(c)):
    t(hidden_states=x, timestep=inp["timestep"], encoder_hidden_states=ctx, return_dict=False)
torch.cuda.synchronize()
after_transformer = torch.cuda.max_memory_reserved()
vae.decode(inp["vae_latents"].to(bf)).sample
torch.cuda.synchronize()
r = {"max_allocated_bytes": torch.cuda.max_memory_allocated(), "max_reserved_bytes": torch.cuda.max_memory_reserved(),
     "max_reserved_after_transformer_bytes": after_transformer}
json.dump(r, open(A.out, "w"))
print("diffusers_mem:", r)
