"""Trains the embedded default model: a small Wan 2.1 text-to-video model on procedural clips.

The checkpoint is built from the reference classes (diffusers' AutoencoderKLWan and
WanTransformer3DModel, transformers' UMT5EncoderModel, a word-level tokenizer.json), so what this
writes is exactly the diffusers layout the Rust loader reads.

Stages (each resumable from the folder it writes; run in chunks of a few minutes of GPU time):

    fastvideo dataset --out data --clips 24000          # training clips (held-out combos excluded)
    python3 train_default.py --data data --stage vae --minutes 5 --out ckpt
    python3 train_default.py --data data --stage dit --minutes 9 --out ckpt   # repeat to resume
    python3 train_default.py --data data --stage dit --minutes 9 --out ckpt --anneal  # last run

`--stage vae` trains the VAE (L1 + MSE reconstruction with object pixels weighted 10x, tiny KL;
`--edge-weight W` adds an L1 on spatial gradients so corners count; `--single-frames` trains on
one frame per clip; `--decoder-only` freezes the encoder so an already trained transformer
keeps its latent space). `--stage dit` freezes the VAE,
encodes every clip once, sets the VAE's latents_mean/std from the data, and trains the
transformer and the text encoder jointly with the flow-matching objective (velocity
`noise - x0`, logit-normal sigmas) and 10% prompt dropout so classifier-free guidance works.
Each stage appends to ckpt/train_log.jsonl (step, loss, seconds) and ckpt/train_state.json.
Resuming reloads the weights and the step count; optimizer moments restart (short warm-up).
"""

import argparse
import json
import os
import time

import sys

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from transformers import UMT5Config, UMT5EncoderModel

# The tokenizer and scheduler are built exactly as for the parity fixtures.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures"))
from make_fixtures import tokenizer as word_tokenizer  # noqa: E402
from make_fixtures import unipc  # noqa: E402

WORDS = (
    "a on background moving left right up down growing shrinking "
    "red green blue yellow purple orange white black gray "
    "circle square triangle star cross"
).split()
TEXT_LEN = 16
Z_DIM = 16


def tokenizer():
    return word_tokenizer(WORDS)


def new_vae():
    return AutoencoderKLWan(
        base_dim=16,
        z_dim=Z_DIM,
        dim_mult=[1, 2, 4, 4],
        num_res_blocks=1,
        attn_scales=[],
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * Z_DIM,
        latents_std=[1.0] * Z_DIM,
    )


def new_text_encoder(vocab_size):
    return UMT5EncoderModel(
        UMT5Config(
            vocab_size=vocab_size,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            relative_attention_max_distance=16,
            feed_forward_proj="gated-gelu",
            dropout_rate=0.0,
        )
    )


def new_transformer():
    return WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=4,
        attention_head_dim=32,
        in_channels=Z_DIM,
        out_channels=Z_DIM,
        text_dim=64,
        freq_dim=64,
        ffn_dim=512,
        num_layers=8,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        eps=1e-6,
        rope_max_seq_len=32,
    )


def load_clips(data, device):
    meta = json.load(open(os.path.join(data, "clips.json")))
    n, f, h, w, c = meta["shape"]
    raw = np.fromfile(os.path.join(data, "clips.u8"), dtype=np.uint8).reshape(n, f, h, w, c)
    clips = torch.from_numpy(raw).to(device).permute(0, 4, 1, 2, 3).contiguous()  # N, 3, F, H, W uint8
    return clips, meta["prompts"]


def to_unit(x):
    return x.float() / 127.5 - 1.0


class Log:
    def __init__(self, out, stage):
        self.path = os.path.join(out, "train_log.jsonl")
        self.stage = stage

    def write(self, **kw):
        with open(self.path, "a") as f:
            f.write(json.dumps({"stage": self.stage, **kw}) + "\n")


def state(out):
    p = os.path.join(out, "train_state.json")
    return json.load(open(p)) if os.path.exists(p) else {"vae_steps": 0, "dit_steps": 0, "gpu_seconds": 0.0}


def save_state(out, st):
    json.dump(st, open(os.path.join(out, "train_state.json"), "w"), indent=2)


def vae_loss(rec, x, kl, edge_weight):
    """Reconstruction loss of a video VAE on procedural clips ([B, 3, F, H, W] in [-1, 1]).

    The object covers ~7% of the pixels: unweighted L1 is minimised by drawing background only
    (the median), which is what a first run learned. Object pixels weigh 10x more. With
    `edge_weight`, the spatial gradients are matched too (shapes differ only at their edges), so
    a decoder that rounds every corner off (what 1,407 steps of pixel loss learned) pays for it.
    """
    bg = x[:, :, :, :1, :1]  # the top-left pixel is always background
    w = 1.0 + 10.0 * ((x - bg).abs().sum(dim=1, keepdim=True) > 0.1).float()
    err = (rec - x).abs() + (rec - x).square()
    loss = (w * err).mean() / w.mean() + 1e-4 * kl
    if edge_weight > 0:
        def grads(v):
            return v[..., :, 1:] - v[..., :, :-1], v[..., 1:, :] - v[..., :-1, :]

        (rx, ry), (xx, xy) = grads(rec), grads(x)
        wx, wy = w[..., :, 1:], w[..., 1:, :]
        edge = (wx * (rx - xx).abs()).mean() / wx.mean() + (wy * (ry - xy).abs()).mean() / wy.mean()
        loss = loss + edge_weight * edge
    return loss


def update(opt, loss, params):
    """One optimizer step on `loss`, gradients clipped to norm 1."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def train_vae(args, device):
    clips, _ = load_clips(args.data, device)
    vae_dir = os.path.join(args.out, "vae")
    vae = AutoencoderKLWan.from_pretrained(vae_dir) if os.path.exists(vae_dir) else new_vae()
    vae.to(device).train()
    params = list(vae.parameters())
    if args.decoder_only:
        # Keep the latent space the transformer was trained on: only the decoder learns.
        for m in (vae.encoder, vae.quant_conv):
            m.requires_grad_(False)
        params = [p for p in vae.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    st, log = state(args.out), Log(args.out, "vae")
    start, step = time.time(), st["vae_steps"]
    g = torch.Generator(device=device).manual_seed(step)
    while time.time() - start < args.minutes * 60:
        idx = torch.randint(0, clips.shape[0], (args.batch,), device=device, generator=g)
        x = to_unit(clips[idx])
        if args.single_frames:
            # Spatial detail (corners) is learned from single frames, which the causal VAE
            # encodes alone, at 1/17 of a clip's cost: one random frame per sample.
            t = torch.randint(0, x.shape[2], (1,), device=device, generator=g).item()
            x = x[:, :, t : t + 1]
        warm = min(1.0, (step - st["vae_steps"] + 1) / 100)
        for group in opt.param_groups:
            group["lr"] = args.lr * warm
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            if args.decoder_only:
                with torch.no_grad():
                    post = vae.encode(x).latent_dist
            else:
                post = vae.encode(x).latent_dist
            rec = vae.decode(post.sample(generator=g)).sample.float()
        kl = post.kl().float().mean() / x[0].numel()
        loss = vae_loss(rec, x, kl, args.edge_weight)
        update(opt, loss, params)
        step += 1
        if step % 50 == 0:
            log.write(step=step, loss=loss.item(), kl=kl.item(), seconds=time.time() - start)
            print(f"vae step {step} loss {loss.item():.4f}", flush=True)
    print(f"vae: {step - st['vae_steps']} steps in {time.time() - start:.0f}s, now {step}", flush=True)
    st["vae_steps"] = step
    st["gpu_seconds"] += time.time() - start
    vae.eval().save_pretrained(vae_dir, safe_serialization=True)
    save_state(args.out, st)


@torch.no_grad()
def encode_all(vae, clips, batch=64):
    out = []
    for i in range(0, clips.shape[0], batch):
        out.append(vae.encode(to_unit(clips[i : i + batch])).latent_dist.mode())
    return torch.cat(out)


def embed(text_encoder, tok, prompts, device):
    enc = tok(prompts, padding="max_length", max_length=TEXT_LEN, truncation=True, return_tensors="pt")
    ids, mask = enc.input_ids.to(device), enc.attention_mask.to(device)
    h = text_encoder(ids, mask).last_hidden_state
    return h * mask.unsqueeze(-1).to(h.dtype)


def train_dit(args, device):
    clips, prompts = load_clips(args.data, device)
    vae = AutoencoderKLWan.from_pretrained(os.path.join(args.out, "vae")).to(device).eval()
    t0 = time.time()
    z = encode_all(vae, clips)
    mean = z.mean(dim=(0, 2, 3, 4))
    std = z.std(dim=(0, 2, 3, 4))
    if not vae.config.latents_std or vae.config.latents_std == [1.0] * Z_DIM:
        vae.register_to_config(latents_mean=mean.tolist(), latents_std=std.tolist())
        vae.save_pretrained(os.path.join(args.out, "vae"), safe_serialization=True)
    m = torch.tensor(vae.config.latents_mean, device=device).view(1, -1, 1, 1, 1)
    s = torch.tensor(vae.config.latents_std, device=device).view(1, -1, 1, 1, 1)
    z = (z - m) / s
    del clips
    print(f"encoded {z.shape[0]} clips to {tuple(z.shape[1:])} in {time.time() - t0:.1f}s", flush=True)

    tok = tokenizer()
    te_dir, tr_dir = os.path.join(args.out, "text_encoder"), os.path.join(args.out, "transformer")
    te = UMT5EncoderModel.from_pretrained(te_dir) if os.path.exists(te_dir) else new_text_encoder(len(tok))
    tr = WanTransformer3DModel.from_pretrained(tr_dir) if os.path.exists(tr_dir) else new_transformer()
    te.to(device).train()
    tr.to(device).train()
    params = list(tr.parameters()) + list(te.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    st, log = state(args.out), Log(args.out, "dit")
    start, step = time.time(), st["dit_steps"]
    g = torch.Generator(device=device).manual_seed(1000 + step)
    budget = args.minutes * 60
    while time.time() - start < budget:
        idx = torch.randint(0, z.shape[0], (args.batch,), device=device, generator=g)
        x0 = z[idx]
        batch_prompts = [prompts[i] if torch.rand(1).item() > 0.1 else "" for i in idx.tolist()]
        warm = min(1.0, (step - st["dit_steps"] + 1) / 200)
        # --anneal: the learning rate falls linearly to 5% over this run (the last session).
        decay = max(0.05, 1 - (time.time() - start) / budget) if args.anneal else 1.0
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * decay
        sigma = torch.sigmoid(torch.randn(args.batch, device=device, generator=g))
        noise = torch.randn(x0.shape, device=device, generator=g)
        sv = sigma.view(-1, 1, 1, 1, 1)
        xt = (1 - sv) * x0 + sv * noise
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            ctx = embed(te, tok, batch_prompts, device)
            pred = tr(xt, sigma * 1000, ctx, return_dict=False)[0]
        loss = F.mse_loss(pred.float(), noise - x0)
        update(opt, loss, params)
        step += 1
        if step % 100 == 0:
            log.write(step=step, loss=loss.item(), lr=opt.param_groups[0]["lr"], seconds=time.time() - start)
            print(f"dit step {step} loss {loss.item():.4f}", flush=True)
    print(f"dit: {step - st['dit_steps']} steps in {time.time() - start:.0f}s, now {step}", flush=True)
    st["dit_steps"] = step
    st["gpu_seconds"] += time.time() - start
    te.eval().save_pretrained(te_dir, safe_serialization=True)
    tr.eval().save_pretrained(tr_dir, safe_serialization=True)
    save_state(args.out, st)
    write_pipeline_files(args.out, tok)


def write_pipeline_files(out, tok):
    """model_index.json, tokenizer/, scheduler/ and fastvideo.json next to the trained weights."""
    tok.save_pretrained(os.path.join(out, "tokenizer"))
    sched = unipc(3.0)
    sched.save_pretrained(os.path.join(out, "scheduler"))
    index = {
        "_class_name": "WanPipeline",
        "_diffusers_version": "0.42.1",
        "boundary_ratio": None,
        "expand_timesteps": False,
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "TokenizersBackend"],
        "transformer": ["diffusers", "WanTransformer3DModel"],
        "transformer_2": [None, None],
        "vae": ["diffusers", "AutoencoderKLWan"],
    }
    json.dump(index, open(os.path.join(out, "model_index.json"), "w"), indent=2)
    run = os.path.join(out, "fastvideo.json")
    if not os.path.exists(run):
        json.dump(
            {
                "description": "trained by this project on procedural clips (models/training): "
                "shapes, colours, motions and backgrounds; see docs/quality.md",
                "steps": 20,
                "guidance_scale": 4.0,
                "height": 64,
                "width": 64,
                "num_frames": 17,
                "fps": 8,
                "max_sequence_length": TEXT_LEN,
            },
            open(run, "w"),
            indent=2,
        )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--stage", choices=["vae", "dit"], required=True)
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--anneal", action="store_true", help="decay the learning rate over this run (dit)")
    p.add_argument("--edge-weight", type=float, default=0.0, help="vae: weight of the spatial-gradient L1 term")
    p.add_argument("--single-frames", action="store_true", help="vae: train on one random frame per clip")
    p.add_argument("--decoder-only", action="store_true", help="vae: freeze the encoder (keeps the latent space)")
    args = p.parse_args()
    if args.lr is None:
        args.lr = 1e-3 if args.stage == "vae" else 5e-4
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    (train_vae if args.stage == "vae" else train_dit)(args, device)


if __name__ == "__main__":
    main()
