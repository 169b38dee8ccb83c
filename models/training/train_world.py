"""Trains the shipped world model (models/world): the default model's transformer fine-tuned to
run causally, one latent frame (4 video frames) per chunk, conditioned on an action per latent
frame, on the procedural ball-and-square world (`fastvideo dataset --world`).

    fastvideo dataset --world --out data --clips 12000 --steps 9
    python3 train_world.py --data data --init models/default --out ckpt --minutes 8

Recipe (teacher forcing, as the rollout will see it):
- The VAE and text encoder are the default model's, frozen; every clip is encoded once.
- Each training sample is the clip's clean latent frames followed by a noisy copy of them, one
  forward over both halves: clean frame i attends block-causally to the clean frames a rollout
  would hold (a window of `window` frames, the first `sink` kept — world.json), noisy frame i to
  those same clean frames and itself; both halves of frame i carry its rotary position and its
  action. The loss is flow matching (velocity `noise - x0`) on the noisy half. So each noisy
  frame is trained exactly as the Rust rollout denoises a new chunk against the committed
  (t = 0) keys and values of the frames before it.
- Noise levels per frame: half from the rollout's own few-step schedule, half logit-normal.
- The action embedder's projection starts at zero, so training starts from the default model.
- `--context-noise S` (second run): half the context frames get noise up to sigma S (with their
  timestep saying so), so the model copes with its own imperfect frames as context.
Weights are saved in bf16 (the Rust loader converts at load) to keep the folder under 15 MB.
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from safetensors.torch import save_file
from transformers import UMT5EncoderModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from causal_wan import ACTIONS, ActionEmbedder, CausalWan, teacher_forcing_mask  # noqa: E402
from train_default import embed, encode_all, tokenizer  # noqa: E402

PROMPT = "a red circle on a white background"
WORLD = {
    "description": "trained by this project (models/training/train_world.py): a red ball that the actions "
    "move in a walled box, a blue square drifting on its own; see docs/world.md",
    "chunk_frames": 1,
    "timesteps": [1000.0, 750.0, 500.0, 250.0],
    "shift": 3.0,
    "window": 6,
    "sink": 1,
    "fps": 16,
    "height": 64,
    "width": 64,
    "prompt": PROMPT,
}


def sigmas(world):
    s = [t / 1000.0 for t in world["timesteps"]]
    return [world["shift"] * v / (1 + (world["shift"] - 1) * v) for v in s]


def load(data, device):
    meta = json.load(open(os.path.join(data, "clips.json")))
    n, f, h, w, c = meta["shape"]
    raw = np.fromfile(os.path.join(data, "clips.u8"), dtype=np.uint8).reshape(n, f, h, w, c)
    acts = np.fromfile(os.path.join(data, "actions.u8"), dtype=np.uint8).reshape(n, meta["steps"])
    assert meta["actions"] == ACTIONS, meta["actions"]
    clips = torch.from_numpy(raw).permute(0, 4, 1, 2, 3).contiguous()
    return clips, torch.from_numpy(acts.astype(np.int64)).to(device)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--init", required=True, help="the default model folder (VAE, text encoder, transformer to start from)")
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=8.0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: time only)")
    p.add_argument("--context-noise", type=float, default=0.0,
                   help="noise up to this sigma on the clean half, for half the frames (robustness to the "
                   "model's own imperfect frames as context in a rollout)")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    vae = AutoencoderKLWan.from_pretrained(os.path.join(args.init, "vae")).to(device).eval()
    clips, actions = load(args.data, device)
    with torch.no_grad():
        z = torch.cat([encode_all(vae, clips[i : i + 2048].to(device)) for i in range(0, clips.shape[0], 2048)])
    m = torch.tensor(vae.config.latents_mean, device=device).view(1, -1, 1, 1, 1)
    s = torch.tensor(vae.config.latents_std, device=device).view(1, -1, 1, 1, 1)
    z = (z - m) / s
    del clips
    frames = z.shape[2]
    print(f"encoded {z.shape[0]} clips to {tuple(z.shape[1:])} in {time.time() - t0:.1f}s", flush=True)

    te = UMT5EncoderModel.from_pretrained(os.path.join(args.init, "text_encoder")).to(device).eval()
    with torch.no_grad():
        ctx1 = embed(te, tokenizer(), [PROMPT], device)
    resume = os.path.join(args.out, "transformer")
    tr = WanTransformer3DModel.from_pretrained(resume if os.path.exists(resume) else os.path.join(args.init, "transformer"))
    tr = tr.to(device=device, dtype=torch.float32).train()
    dim = tr.config.num_attention_heads * tr.config.attention_head_dim
    emb = ActionEmbedder(dim).to(device)
    a_path = os.path.join(args.out, "action_embedder", "diffusion_pytorch_model.safetensors")
    if os.path.exists(a_path):
        from safetensors.torch import load_file

        emb.load_state_dict(load_file(a_path))
    else:
        torch.nn.init.zeros_(emb.proj.weight)
        torch.nn.init.zeros_(emb.proj.bias)
    model = CausalWan(tr)
    mask = teacher_forcing_mask(frames, WORLD["window"], WORLD["sink"], device)
    cos, sin = model.base_rope(z[:1])
    rope = (torch.cat([cos, cos], 1), torch.cat([sin, sin], 1))
    schedule = torch.tensor(sigmas(WORLD), device=device)
    params = list(tr.parameters()) + list(emb.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    st_path = os.path.join(args.out, "train_state.json")
    st = json.load(open(st_path)) if os.path.exists(st_path) else {"world_steps": 0, "gpu_seconds": 0.0}
    log = open(os.path.join(args.out, "train_log.jsonl"), "a")
    g = torch.Generator(device=device).manual_seed(7 + st["world_steps"])
    start, step, budget = time.time(), st["world_steps"], args.minutes * 60
    while time.time() - start < budget and (args.max_steps == 0 or step - st["world_steps"] < args.max_steps):
        b = args.batch
        idx = torch.randint(0, z.shape[0], (b,), device=device, generator=g)
        x0, a = z[idx], actions[idx]
        warm = min(1.0, (step - st["world_steps"] + 1) / 200)
        decay = max(0.05, 1 - (time.time() - start) / budget)
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * decay
        pick = schedule[torch.randint(0, len(schedule), (b, frames), device=device, generator=g)]
        cont = torch.sigmoid(torch.randn(b, frames, device=device, generator=g))
        sigma = torch.where(torch.rand(b, frames, device=device, generator=g) < 0.5, pick, cont)
        noise = torch.randn(x0.shape, device=device, generator=g)
        sv = sigma.view(b, 1, frames, 1, 1)
        xt = (1 - sv) * x0 + sv * noise
        if args.context_noise > 0:
            cs = torch.rand(b, frames, device=device, generator=g) * args.context_noise
            cs = cs * (torch.rand(b, frames, device=device, generator=g) < 0.5)
            csv = cs.view(b, 1, frames, 1, 1)
            ctx_x = (1 - csv) * x0 + csv * torch.randn(x0.shape, device=device, generator=g)
        else:
            cs, ctx_x = torch.zeros_like(sigma), x0
        inp = torch.cat([ctx_x, xt], dim=2)
        ts = torch.cat([cs * 1000, sigma * 1000], dim=1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            cond = emb(torch.cat([a, a], dim=1))
            pred = model(inp, ts, ctx1.expand(b, -1, -1), cond, mask, rope)[:, :, frames:]
        loss = F.mse_loss(pred.float(), noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if step % 100 == 0 or step - st["world_steps"] <= 3:
            log.write(json.dumps({"stage": "world", "step": step, "loss": loss.item(), "seconds": time.time() - start}) + "\n")
            print(f"world step {step} loss {loss.item():.4f}", flush=True)
    spent = time.time() - start
    print(f"world: {step - st['world_steps']} steps in {spent:.0f}s, now {step}", flush=True)
    st["world_steps"] = step
    st["gpu_seconds" if device == "cuda" else "cpu_seconds"] = st.get("gpu_seconds" if device == "cuda" else "cpu_seconds", 0.0) + spent
    json.dump(st, open(st_path, "w"), indent=2)
    save(args, tr, emb, vae, dim)


def save(args, tr, emb, vae, dim):
    out = args.out
    tr.register_to_config(rope_max_seq_len=1024)
    tr.eval().to(torch.bfloat16).save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    a_dir = os.path.join(out, "action_embedder")
    os.makedirs(a_dir, exist_ok=True)
    save_file({k: v.detach().float().contiguous().cpu() for k, v in emb.state_dict().items()},
              os.path.join(a_dir, "diffusion_pytorch_model.safetensors"))
    json.dump({"_class_name": "WanActionEmbedder", "actions": ACTIONS, "dim": dim}, open(os.path.join(a_dir, "config.json"), "w"), indent=2)
    vae.to(torch.bfloat16).save_pretrained(os.path.join(out, "vae"), safe_serialization=True)
    for name in ("text_encoder", "tokenizer", "scheduler"):
        dst = os.path.join(out, name)
        if not os.path.exists(dst):
            shutil.copytree(os.path.join(args.init, name), dst)
    shutil.copy(os.path.join(args.init, "model_index.json"), os.path.join(out, "model_index.json"))
    json.dump(WORLD, open(os.path.join(out, "world.json"), "w"), indent=2)
    # The prompt is embedded at the length it was trained with (train_default's TEXT_LEN); without
    # this the loader's default of 512 tokens puts 496 padding tokens into every cross-attention.
    json.dump({"description": "the world model's text settings (its rollout settings are in world.json)",
               "max_sequence_length": 16}, open(os.path.join(out, "fastvideo.json"), "w"), indent=2)


if __name__ == "__main__":
    main()
