"""Trains the shipped image-to-video model (models/default-i2v): the default text-to-video model
grown into a Wan 2.1 I2V pipeline (diffusers `WanImageToVideoPipeline`) and fine-tuned on the
procedural clips, so that a picture plus a prompt continue as a clip whose first frame is the
picture and whose object moves as the prompt says.

    fastvideo dataset --out data --clips 24000
    python3 train_i2v.py --data data --init models/default --out ckpt --minutes 8

What is built (every part a reference class, so diffusers runs the folder as it is):
- the default model's VAE and text encoder, frozen (the latent space and the prompt embeddings
  are the ones the transformer already knows);
- a small CLIP vision encoder (transformers `CLIPVisionModel`, 64x64 pictures in 8x8 patches, 65
  tokens of width 64) with its `CLIPImageProcessor`; trained with the transformer, its
  penultimate layer feeding the transformer's image cross-attention, as in Wan 2.1;
- the default transformer with Wan 2.1's image path: 36 input channels (16 noisy latent, 4 mask,
  16 condition latent), `image_dim`, `added_kv_proj_dim`. The default's weights are copied in;
  the new input channels and the image values (`add_v_proj`) start at zero, so training starts
  from the text-to-video model exactly.

Training inputs are built as the pipeline builds them at inference: the condition video is the
first frame followed by zeros (grey), VAE-encoded (mode) and normalised; the mask marks the
first latent frame. Text is padded to 512 tokens, since diffusers' attention splits the image
tokens off the cross-attention context at a hard-coded 512 text tokens. 10% of prompts are
dropped so classifier-free guidance works. Flow matching (velocity `noise - x0`, logit-normal
sigmas), as the default model. `--anneal` decays the learning rate over the run.
Writes the whole pipeline folder; the transformer in bf16 (the Rust loader converts at load).
"""

import argparse
import json
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from safetensors.torch import save_file
from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, UMT5EncoderModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_default import TEXT_LEN, Z_DIM, encode_all, load_clips, to_unit, tokenizer  # noqa: E402

# diffusers' WanAttnProcessor takes the last 512 context tokens as text.
DIFFUSERS_TEXT_LEN = 512
CLIP_DIM = 64
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def new_image_encoder():
    return CLIPVisionModel(
        CLIPVisionConfig(
            hidden_size=CLIP_DIM,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            image_size=64,
            patch_size=8,
            hidden_act="gelu",
            layer_norm_eps=1e-5,
            projection_dim=32,
        )
    )


def image_processor():
    return CLIPImageProcessor(
        size={"shortest_edge": 64},
        crop_size={"height": 64, "width": 64},
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
    )


def grown_transformer(init_dir):
    """The default transformer with Wan 2.1's image path added, starting as the default model."""
    base = WanTransformer3DModel.from_pretrained(init_dir)
    cfg = dict(base.config)
    inner = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    for k in [k for k in cfg if k.startswith("_")]:
        del cfg[k]
    cfg.update(in_channels=2 * Z_DIM + 4, image_dim=CLIP_DIM, added_kv_proj_dim=inner)
    t = WanTransformer3DModel(**cfg)
    sd = base.state_dict()
    w = sd.pop("patch_embedding.weight")
    grown = torch.zeros_like(t.patch_embedding.weight)
    grown[:, : w.shape[1]] = w
    sd["patch_embedding.weight"] = grown
    missing, unexpected = t.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("image_embedder" in k or "add_" in k or "norm_added" in k for k in missing), missing
    with torch.no_grad():
        for b in t.blocks:
            b.attn2.add_v_proj.weight.zero_()
            b.attn2.add_v_proj.bias.zero_()
    return t


def first_frame_mask(batch, latent_frames, lh, lw, device):
    """The pipeline's mask: 1 on the first latent frame's 4 channels, 0 elsewhere."""
    m = torch.zeros(batch, 4, latent_frames, lh, lw, device=device)
    m[:, :, 0] = 1.0
    return m


def clip_pixels(first_u8):
    """What CLIPImageProcessor makes of a 64x64 picture (resize and crop are identities)."""
    mean = torch.tensor(CLIP_MEAN, device=first_u8.device).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD, device=first_u8.device).view(1, 3, 1, 1)
    return (first_u8.float() / 255.0 - mean) / std


@torch.no_grad()
def condition_latents(vae, clips, mean, std, batch=64):
    """Per clip: [first frame, grey, grey, ...] through the VAE (mode), normalised."""
    out = []
    for i in range(0, clips.shape[0], batch):
        x = to_unit(clips[i : i + batch])
        x[:, :, 1:] = 0.0
        out.append((vae.encode(x).latent_dist.mode() - mean) / std)
    return torch.cat(out)


@torch.no_grad()
def prompt_table(te, tok, prompts, device):
    """Every distinct prompt (and "") embedded once, padded to diffusers' 512 text tokens."""
    uniq = sorted(set(prompts) | {""})
    enc = tok(uniq, padding="max_length", max_length=TEXT_LEN, truncation=True, return_tensors="pt")
    ids, mask = enc.input_ids.to(device), enc.attention_mask.to(device)
    h = te(ids, mask).last_hidden_state * mask.unsqueeze(-1)
    h = F.pad(h, (0, 0, 0, DIFFUSERS_TEXT_LEN - TEXT_LEN))
    return {p: i for i, p in enumerate(uniq)}, h


def state(out):
    p = os.path.join(out, "train_state.json")
    return json.load(open(p)) if os.path.exists(p) else {"i2v_steps": 0, "gpu_seconds": 0.0}


def train(args, device):
    clips, prompts = load_clips(args.data, device)
    vae = AutoencoderKLWan.from_pretrained(os.path.join(args.init, "vae")).to(device).eval()
    m = torch.tensor(vae.config.latents_mean, device=device).view(1, -1, 1, 1, 1)
    s = torch.tensor(vae.config.latents_std, device=device).view(1, -1, 1, 1, 1)
    t0 = time.time()
    z = (encode_all(vae, clips) - m) / s
    cond = condition_latents(vae, clips, m, s)
    first = clips[:, :, 0].contiguous()  # N, 3, H, W uint8
    del clips
    print(f"encoded {z.shape[0]} clips and their conditions in {time.time() - t0:.1f}s", flush=True)

    tok = tokenizer()
    te = UMT5EncoderModel.from_pretrained(os.path.join(args.init, "text_encoder")).to(device).eval()
    index, table = prompt_table(te, tok, prompts, device)
    prompt_ids = torch.tensor([index[p] for p in prompts], device=device)
    empty = index[""]

    tr_dir, enc_dir = os.path.join(args.out, "transformer"), os.path.join(args.out, "image_encoder")
    resume = os.path.exists(tr_dir)
    tr = WanTransformer3DModel.from_pretrained(tr_dir) if resume else grown_transformer(os.path.join(args.init, "transformer"))
    enc = CLIPVisionModel.from_pretrained(enc_dir) if resume else new_image_encoder()
    tr.to(device).train()
    enc.to(device).train()
    new = [p for n, p in tr.named_parameters() if "image_embedder" in n or ".add_" in n or "norm_added" in n or n == "patch_embedding.weight"]
    new_ids = {id(p) for p in new}
    old = [p for p in tr.parameters() if id(p) not in new_ids]
    groups = [
        {"params": old, "base": args.lr},
        {"params": new + list(enc.parameters()), "base": args.lr * args.new_lr_mult},
    ]
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.01)
    st = state(args.out)
    log_path = os.path.join(args.out, "train_log.jsonl")
    start, step = time.time(), st["i2v_steps"]
    g = torch.Generator(device=device).manual_seed(2000 + step)
    budget = args.minutes * 60
    _, _, lf, lh, lw = z.shape
    mask = first_frame_mask(args.batch, lf, lh, lw, device)
    while time.time() - start < budget:
        idx = torch.randint(0, z.shape[0], (args.batch,), device=device, generator=g)
        x0 = z[idx]
        drop = torch.rand(args.batch, device=device, generator=g) < 0.1
        ctx = table[torch.where(drop, torch.full_like(idx, empty), prompt_ids[idx])]
        warm = min(1.0, (step - st["i2v_steps"] + 1) / 200)
        decay = max(0.05, 1 - (time.time() - start) / budget) if args.anneal else 1.0
        for group in opt.param_groups:
            group["lr"] = group["base"] * warm * decay
        sigma = torch.sigmoid(torch.randn(args.batch, device=device, generator=g))
        noise = torch.randn(x0.shape, device=device, generator=g)
        sv = sigma.view(-1, 1, 1, 1, 1)
        xt = (1 - sv) * x0 + sv * noise
        inp = torch.cat([xt, mask, cond[idx]], dim=1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            img = enc(pixel_values=clip_pixels(first[idx]), output_hidden_states=True).hidden_states[-2]
            pred = tr(inp, sigma * 1000, ctx, encoder_hidden_states_image=img, return_dict=False)[0]
        loss = F.mse_loss(pred.float(), noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(tr.parameters()) + list(enc.parameters()), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            with open(log_path, "a") as f:
                f.write(json.dumps({"stage": "i2v", "step": step, "loss": loss.item(), "seconds": time.time() - start}) + "\n")
            print(f"i2v step {step} loss {loss.item():.4f}", flush=True)
    secs = time.time() - start
    print(f"i2v: {step - st['i2v_steps']} steps in {secs:.0f}s, now {step}", flush=True)
    st["i2v_steps"] = step
    st["gpu_seconds"] += secs
    write_folder(args, tr.eval(), enc.eval(), tok)
    json.dump(st, open(os.path.join(args.out, "train_state.json"), "w"), indent=2)


def write_folder(args, tr, enc, tok):
    """The pipeline folder: trained parts saved, frozen parts copied from the default model."""
    out = args.out
    tr.save_pretrained(os.path.join(out, "transformer"), safe_serialization=True)
    # bf16 keeps the folder small; diffusers and the Rust loader both convert at load.
    path = os.path.join(out, "transformer", "diffusion_pytorch_model.safetensors")
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in tr.state_dict().items()}
    save_file(sd, path, metadata={"format": "pt"})
    enc.save_pretrained(os.path.join(out, "image_encoder"), safe_serialization=True)
    image_processor().save_pretrained(os.path.join(out, "image_processor"))
    for part in ("vae", "text_encoder", "tokenizer", "scheduler"):
        dst = os.path.join(out, part)
        if not os.path.exists(dst):
            shutil.copytree(os.path.join(args.init, part), dst)
    index = json.load(open(os.path.join(args.init, "model_index.json")))
    index["_class_name"] = "WanImageToVideoPipeline"
    index["image_encoder"] = ["transformers", "CLIPVisionModel"]
    index["image_processor"] = ["transformers", "CLIPImageProcessor"]
    json.dump(dict(sorted(index.items())), open(os.path.join(out, "model_index.json"), "w"), indent=2)
    run = json.load(open(os.path.join(args.init, "fastvideo.json")))
    run["description"] = (
        "trained by this project (models/training/train_i2v.py): the default model continued from a "
        "first frame, as Wan 2.1 image-to-video; see docs/quality.md"
    )
    run["max_sequence_length"] = DIFFUSERS_TEXT_LEN
    json.dump(run, open(os.path.join(out, "fastvideo.json"), "w"), indent=2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--init", required=True, help="the text-to-video folder to grow (models/default)")
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=8.0)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--new-lr-mult", type=float, default=5.0, help="learning-rate factor for the new image parts")
    p.add_argument("--anneal", action="store_true")
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    train(args, device)


if __name__ == "__main__":
    main()
