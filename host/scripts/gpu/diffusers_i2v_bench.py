#!/usr/bin/env python3
"""diffusers' side of the image-to-video benchmark (host/scripts/gpu/i2v_bench.sh): on one
random-weight Wan2.1-I2V folder (make_wan_i2v.py), the transformer forward and CFG step in bf16,
eager and torch.compile; the CLIP image encoder on one 224x224 picture; the VAE encode of the
conditioning video (first frame and black frames, as WanImageToVideoPipeline.prepare_latents
builds it); peak memory of each. Writes the forward's inputs under diffusers' argument names
(`fastvideo bench --inputs` reads them) and the bf16 eager velocity, and a JSON of figures.

    python3 diffusers_i2v_bench.py --model DIR --out DIR [--frames 81 --height 480 --width 832]
"""
import argparse
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import Bench  # noqa: E402

P = argparse.ArgumentParser()
P.add_argument("--model", required=True)
P.add_argument("--out", required=True)
P.add_argument("--frames", type=int, default=81)
P.add_argument("--height", type=int, default=480)
P.add_argument("--width", type=int, default=832)
P.add_argument("--runs", type=int, default=3)
P.add_argument("--skip-compile", action="store_true")
P.add_argument("--device", default="cuda")
P.add_argument("--seed", type=int, default=0)
P.add_argument("--inputs-only", action="store_true", help="write inputs.safetensors and stop")
A = P.parse_args()
DEV = torch.device(A.device)
CUDA = DEV.type == "cuda"
R = {"frames": A.frames, "height": A.height, "width": A.width, "torch": torch.__version__,
     "gpu": torch.cuda.get_device_name(DEV) if CUDA else "cpu"}


B = Bench(DEV, "diffusers_i2v_bench", os.path.join(A.out, "diffusers_i2v.json"), R)
sync, free, peak, timed, log, dump = B.sync, B.free, B.peak, B.timed, B.log, B.dump


from diffusers import AutoencoderKLWan, WanTransformer3DModel  # noqa: E402
from transformers import CLIPVisionModel  # noqa: E402

os.makedirs(A.out, exist_ok=True)
tdir = os.path.join(A.model, "transformer")
with open(os.path.join(tdir, "config.json")) as f:
    tcfg = json.load(f)
with open(os.path.join(A.model, "image_encoder", "config.json")) as f:
    ccfg = json.load(f)
g = torch.Generator().manual_seed(A.seed)
lat = [1, tcfg["in_channels"], (A.frames - 1) // 4 + 1, A.height // 8, A.width // 8]
tokens = (ccfg["image_size"] // ccfg["patch_size"]) ** 2 + 1
rows = 2 if tcfg.get("pos_embed_seq_len") else 1
inputs = {
    "hidden_states": torch.randn(lat, generator=g),
    "timestep": torch.tensor([500.0]),
    "encoder_hidden_states": torch.randn([1, 512, tcfg["text_dim"]], generator=g),
    "encoder_hidden_states_image": torch.randn([rows, tokens, tcfg["image_dim"]], generator=g),
}
save_file(inputs, os.path.join(A.out, "inputs.safetensors"))
log(f"inputs: hidden_states {lat}, image states {[rows, tokens, tcfg['image_dim']]}")
if A.inputs_only:
    raise SystemExit(0)

with torch.inference_mode():
    free()
    t = time.perf_counter()
    m = WanTransformer3DModel.from_pretrained(tdir, dtype=torch.bfloat16).to(DEV).eval()
    sync()
    R["bf16_load_s"] = time.perf_counter() - t
    x, ts, c, img = (inputs[k].to(DEV) for k in ("hidden_states", "timestep", "encoder_hidden_states",
                                                 "encoder_hidden_states_image"))
    x, c, img = x.to(torch.bfloat16), c.to(torch.bfloat16), img.to(torch.bfloat16)
    u = torch.zeros_like(c)

    def fwd_of(model):
        def one(ctx):
            return model(hidden_states=x, timestep=ts, encoder_hidden_states=ctx, encoder_hidden_states_image=img,
                         return_dict=False)[0]

        def cfg_step():
            cond, uncond = one(c), one(u)
            return uncond + 5.0 * (cond - uncond)
        return (lambda: one(c)), cfg_step

    fwd, cfg = fwd_of(m)
    free()
    R["bf16_eager_forward_s"], v = timed(fwd, A.runs, 1)
    R["bf16_eager_forward_peak_bytes"] = peak()
    save_file({"velocity": v.float().cpu().contiguous()}, os.path.join(A.out, "ref_bf16.safetensors"))
    R["bf16_eager_cfg_step_s"], _ = timed(cfg, A.runs, 0)
    log(f"bf16 eager forward {R['bf16_eager_forward_s']:.3f} s, CFG step {R['bf16_eager_cfg_step_s']:.3f} s")
    dump()
    del v
    if not A.skip_compile:
        cm = torch.compile(m)
        cfwd, ccfg_step = fwd_of(cm)
        free()
        sync()
        t = time.perf_counter()
        cfwd()
        sync()
        R["compile_s"] = time.perf_counter() - t
        R["bf16_compile_forward_s"], v = timed(cfwd, A.runs, 1)
        R["bf16_compile_forward_peak_bytes"] = peak()
        R["bf16_compile_cfg_step_s"], _ = timed(ccfg_step, A.runs, 0)
        log(f"compile {R['compile_s']:.1f} s, forward {R['bf16_compile_forward_s']:.3f} s, "
            f"CFG step {R['bf16_compile_cfg_step_s']:.3f} s")
        dump()
        del cm, v
        torch._dynamo.reset()
    del m, x, c, u, img

    # CLIP on the picture(s), float32 as diffusers' Wan I2V examples load the image encoder.
    free()
    enc = CLIPVisionModel.from_pretrained(os.path.join(A.model, "image_encoder"), dtype=torch.float32).to(DEV).eval()
    px = torch.randn([rows, 3, ccfg["image_size"], ccfg["image_size"]], generator=g).to(DEV)
    R["image_encode_s"], _ = timed(lambda: enc(pixel_values=px, output_hidden_states=True).hidden_states[-2],
                                   A.runs, 1)
    R["image_encode_peak_bytes"] = peak()
    log(f"CLIP image encode {R['image_encode_s']:.4f} s")
    dump()
    del enc, px

    # VAE encode of the conditioning video, float32 as the examples load the VAE, and bf16.
    video = torch.zeros([1, 3, A.frames, A.height, A.width])
    video[:, :, 0] = torch.rand([1, 3, A.height, A.width], generator=g) * 2 - 1
    if rows == 2:
        video[:, :, -1] = video[:, :, 0].flip(-1)
    for name, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        free()
        vae = AutoencoderKLWan.from_pretrained(os.path.join(A.model, "vae"), dtype=dtype).to(DEV).eval()
        vd = video.to(DEV, dtype)
        R[f"vae_encode_{name}_s"], _ = timed(lambda v=vae, x=vd: v.encode(x).latent_dist.mode(), 1, 1)
        R[f"vae_encode_{name}_peak_bytes"] = peak()
        log(f"VAE encode {name} {R[f'vae_encode_{name}_s']:.3f} s")
        dump()
        del vae, vd

dump()
print(json.dumps(R), flush=True)
