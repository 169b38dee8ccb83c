"""Trains a model folder's tiny video decoder (`tiny_vae/`, models/training/tiny_vae.py) to mimic
its full VAE decoder: the clips of `fastvideo dataset` are encoded once by the folder's VAE (the
posterior mean, the latents the full decoder sees), decoded once by the full decoder (the target),
and the tiny decoder learns latents -> those frames (MSE + L1, plus an L1 on spatial gradients so
edges stay sharp). The last tenth of the clips is held out: the PSNR of the tiny decoder against
the full one on them is written to `train_state.json` beside the weights. Resumes from `--out` when
it holds weights. Runs on a CPU in minutes at the shipped models' size (17x64x64).

    fastvideo dataset --out /tmp/tv-data --clips 2000 --seed 11
    python3 models/training/train_tiny_vae.py --model models/default --data /tmp/tv-data \\
        --out models/default/tiny_vae --minutes 10
    fastvideo dataset --world --out /tmp/tvw-data --clips 1000 --seed 11
    python3 models/training/train_tiny_vae.py --model models/world --data /tmp/tvw-data \\
        --out models/world/tiny_vae --minutes 10
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tiny_vae import TinyVideoDecoder  # noqa: E402

# Small enough to decode a 64x64 world chunk in a few milliseconds on a CPU.
CHANNELS = (64, 48, 32, 32)


def load_clips(data):
    meta = json.load(open(os.path.join(data, "clips.json")))
    n, f, h, w, c = meta["shape"]
    raw = np.fromfile(os.path.join(data, "clips.u8"), dtype=np.uint8).reshape(n, f, h, w, c)
    return torch.from_numpy(raw).permute(0, 4, 1, 2, 3).float() / 127.5 - 1.0  # N, 3, F, H, W


@torch.no_grad()
def latents_and_targets(vae, clips, batch=32):
    zs, ys = [], []
    for i in range(0, len(clips), batch):
        x = clips[i:i + batch]
        z = vae.encode(x).latent_dist.mode()
        zs.append(z)
        ys.append(vae.decode(z).sample.clamp(-1, 1))
        print(f"  {i + len(x)}/{len(clips)} clips through the full VAE", flush=True)
    return torch.cat(zs), torch.cat(ys)


def psnr(a, b):
    mse = F.mse_loss(a, b).item()
    return 10 * math.log10(4.0 / max(mse, 1e-12))  # range [-1, 1]: peak-to-peak 2


def grads(v):
    return v[..., 1:, :] - v[..., :-1, :], v[..., :, 1:] - v[..., :, :-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help="model folder whose vae/ the decoder mimics")
    ap.add_argument("--data", required=True, help="a `fastvideo dataset` folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clips", type=int, help="use only the first N clips of the data")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(os.cpu_count() or 2)

    dev = torch.device(a.device)
    vae = AutoencoderKLWan.from_pretrained(os.path.join(a.model, "vae")).float().eval().to(dev)
    clips = load_clips(a.data)[: a.clips].to(dev)
    t0 = time.time()
    z, y = latents_and_targets(vae, clips)
    print(f"{len(clips)} clips encoded and decoded by the full VAE in {time.time() - t0:.0f} s; latents {tuple(z.shape)}")
    held = max(1, len(z) // 10)
    (z_train, y_train), (z_test, y_test) = (z[:-held], y[:-held]), (z[-held:], y[-held:])

    d = TinyVideoDecoder(latent_channels=z.shape[1], channels=CHANNELS).to(dev)
    weights = os.path.join(a.out, "diffusion_pytorch_model.safetensors")
    state_path = os.path.join(a.out, "train_state.json")
    st = json.load(open(state_path)) if os.path.exists(state_path) else {"steps": 0, "seconds": 0.0, "runs": []}
    if os.path.exists(weights):
        d.load_state_dict(load_file(weights))
        print(f"resumed from {weights} at step {st['steps']}")
    opt = torch.optim.AdamW(d.parameters(), lr=a.lr, weight_decay=0.0)
    start, steps, loss_avg = time.time(), 0, None
    while time.time() - start < a.minutes * 60:
        idx = torch.randint(0, len(z_train), (a.batch,), device=dev)
        out = d(z_train[idx], clamp=False)
        target = y_train[idx]
        loss = F.mse_loss(out, target) + 0.5 * F.l1_loss(out, target)
        loss = loss + 0.5 * sum(F.l1_loss(g, h) for g, h in zip(grads(out), grads(target)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        if steps % 100 == 0:
            print(f"step {st['steps'] + steps}: loss {loss_avg:.4f} ({time.time() - start:.0f} s)", flush=True)
    d.eval()
    d.cpu()
    z_test, y_test, clips = z_test.cpu(), y_test.cpu(), clips.cpu()
    with torch.no_grad():
        test_psnr = psnr(d(z_test), y_test)
        source_psnr = psnr(d(z_test), clips[-held:])
        full_psnr = psnr(y_test, clips[-held:])
    seconds = time.time() - start
    st["steps"] += steps
    st["seconds"] += seconds
    st["runs"].append({"steps": steps, "seconds": round(seconds, 1), "loss": round(loss_avg, 5),
                       "clips": len(clips), "batch": a.batch, "lr": a.lr, "data": os.path.basename(a.data.rstrip("/"))})
    st["heldout_clips"] = held
    st["psnr_vs_full_decoder_db"] = round(test_psnr, 2)
    st["psnr_vs_source_db"] = round(source_psnr, 2)
    st["full_decoder_psnr_vs_source_db"] = round(full_psnr, 2)
    d.save(a.out)
    json.dump(st, open(state_path, "w"), indent=1)
    print(json.dumps(st, indent=1))


if __name__ == "__main__":
    main()
