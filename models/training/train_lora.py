"""Trains the shipped LoRA adapter (models/default-lora-large): the default text-to-video model
taught a look no prompt of its vocabulary asks for, objects 1.65 times their size, as a rank-16
adapter on every linear of its transformer blocks. The base weights stay frozen, so at strength 0
the model is exactly the default one; at strength 1 the same prompts come out with large objects.

    fastvideo dataset --out data --clips 24000 --style large
    python3 train_lora.py --data data --init models/default --out lora.safetensors --minutes 5

Plain torch, no peft: each targeted `nn.Linear` gets `down` (Gaussian, 1/sqrt(in)) and `up`
(zeros, so training starts from the base model) and computes `W x + up(down(x))`. Flow matching
as the default model (velocity `noise - x0`, logit-normal sigmas), 10% of prompts dropped so
guidance still works, prompts embedded by the frozen text encoder. Saved in diffusers' LoRA
format (`transformer.<module>.lora_A/lora_B.weight`, float32, with `lora_adapter_metadata` r=16,
lora_alpha=16), which `WanPipeline.load_lora_weights` and `fastvideo --lora` both read.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from safetensors.torch import save_file
from transformers import UMT5EncoderModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_default import embed, encode_all, load_clips, tokenizer  # noqa: E402

TARGETS = ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k", "attn2.to_v",
           "attn2.to_out.0", "ffn.net.0.proj", "ffn.net.2")


class LoraLinear(torch.nn.Module):
    def __init__(self, base, rank, generator):
        super().__init__()
        self.base = base
        self.down = torch.nn.Parameter(torch.randn(rank, base.in_features, generator=generator) / base.in_features**0.5)
        self.up = torch.nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.down.to(x.dtype)), self.up.to(x.dtype))


def attach(tr, rank, device):
    """Wraps every targeted linear of the blocks; returns {diffusers module name: LoraLinear}."""
    g = torch.Generator().manual_seed(0)
    wrapped = {}
    for name, module in list(tr.named_modules()):
        parts = name.split(".", 2)
        if parts[0] == "blocks" and len(parts) == 3 and parts[2] in TARGETS and isinstance(module, torch.nn.Linear):
            parent_name, child = name.rsplit(".", 1)
            lora = LoraLinear(module, rank, g).to(device)
            setattr(tr.get_submodule(parent_name), child, lora)
            wrapped[name] = lora
    return wrapped


def train(args, device):
    clips, prompts = load_clips(args.data, device)
    vae = AutoencoderKLWan.from_pretrained(os.path.join(args.init, "vae")).to(device).eval()
    m = torch.tensor(vae.config.latents_mean, device=device).view(1, -1, 1, 1, 1)
    s = torch.tensor(vae.config.latents_std, device=device).view(1, -1, 1, 1, 1)
    t0 = time.time()
    with torch.no_grad():
        z = (encode_all(vae, clips) - m) / s
    del clips
    print(f"encoded {z.shape[0]} clips in {time.time() - t0:.1f}s", flush=True)
    tok = tokenizer()
    te = UMT5EncoderModel.from_pretrained(os.path.join(args.init, "text_encoder")).to(device).eval()
    uniq = sorted(set(prompts) | {""})
    with torch.no_grad():
        table = torch.cat([embed(te, tok, uniq[i : i + 256], device) for i in range(0, len(uniq), 256)])
    index = {p: i for i, p in enumerate(uniq)}
    prompt_ids = torch.tensor([index[p] for p in prompts], device=device)
    empty = index[""]

    tr = WanTransformer3DModel.from_pretrained(os.path.join(args.init, "transformer")).to(device)
    tr.requires_grad_(False)
    loras = attach(tr, args.rank, device)
    params = [p for l in loras.values() for p in (l.down, l.up)]
    print(f"{len(loras)} linears adapted, {sum(p.numel() for p in params)} parameters", flush=True)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    log = open(args.out + ".log.jsonl", "w")
    start, step = time.time(), 0
    g = torch.Generator(device=device).manual_seed(3000)
    budget = args.minutes * 60
    while time.time() - start < budget:
        idx = torch.randint(0, z.shape[0], (args.batch,), device=device, generator=g)
        x0 = z[idx]
        drop = torch.rand(args.batch, device=device, generator=g) < 0.1
        ctx = table[torch.where(drop, torch.full_like(idx, empty), prompt_ids[idx])]
        decay = max(0.05, 1 - (time.time() - start) / budget)
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 100) * decay
        sigma = torch.sigmoid(torch.randn(args.batch, device=device, generator=g))
        noise = torch.randn(x0.shape, device=device, generator=g)
        sv = sigma.view(-1, 1, 1, 1, 1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            pred = tr((1 - sv) * x0 + sv * noise, sigma * 1000, ctx, return_dict=False)[0]
        loss = F.mse_loss(pred.float(), noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % 100 == 0:
            log.write(json.dumps({"step": step, "loss": loss.item(), "seconds": time.time() - start}) + "\n")
            log.flush()
            print(f"lora step {step} loss {loss.item():.4f}", flush=True)
    secs = time.time() - start
    print(f"lora: {step} steps in {secs:.0f}s", flush=True)
    sd = {}
    for name, l in loras.items():
        sd[f"transformer.{name}.lora_A.weight"] = l.down.detach().float().cpu().contiguous()
        sd[f"transformer.{name}.lora_B.weight"] = l.up.detach().float().cpu().contiguous()
    meta = {"transformer.r": args.rank, "transformer.lora_alpha": args.rank,
            "transformer.target_modules": sorted(TARGETS)}
    save_file(sd, args.out, metadata={"format": "pt", "lora_adapter_metadata": json.dumps(meta, sort_keys=True)})
    json.dump({"steps": step, "gpu_seconds": secs, "batch": args.batch, "rank": args.rank, "lr": args.lr,
               "clips": int(z.shape[0])}, open(args.out + ".state.json", "w"), indent=2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--init", required=True, help="the model the adapter is for (models/default)")
    p.add_argument("--out", required=True, help="the .safetensors file to write")
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    train(args, device)


if __name__ == "__main__":
    main()
