#!/usr/bin/env python3
"""Times diffusers' Wan 2.1 on a model folder and writes the inputs and fp32/bf16 references that
our binary is compared against (see bench.sh, compare.py).

    python3 diffusers_bench.py --model DIR --out DIR [--frames 81 --height 480 --width 832]
        [--runs 5] [--fp32-runs 2] [--vae-runs 2] [--clip-steps 50] [--skip-compile] [--device cuda]

Writes OUT/inputs.safetensors, OUT/ref_fp32.safetensors, OUT/ref_bf16.safetensors and
OUT/diffusers.json (flat keys: seconds, bytes, ratios). Each phase loads its model, measures and
frees it, so the peak memory of a phase is that phase's alone.
"""
import argparse
import gc
import json
import math
import os
import statistics
import time

import torch
from safetensors.torch import save_file

P = argparse.ArgumentParser()
P.add_argument("--model", required=True)
P.add_argument("--out", required=True)
P.add_argument("--frames", type=int, default=81)
P.add_argument("--height", type=int, default=480)
P.add_argument("--width", type=int, default=832)
P.add_argument("--runs", type=int, default=5)
P.add_argument("--fp32-runs", type=int, default=2, help="fp32 forwards are ~10x slower; fewer keep the budget")
P.add_argument("--vae-runs", type=int, default=2)
P.add_argument("--clip-steps", type=int, default=50, help="0 skips the whole-clip run")
P.add_argument("--skip-compile", action="store_true")
P.add_argument("--device", default="cuda")
P.add_argument("--seed", type=int, default=0)
A = P.parse_args()
DEV = torch.device(A.device)
CUDA = DEV.type == "cuda"
R = {"frames": A.frames, "height": A.height, "width": A.width, "device": A.device,
     "torch": torch.__version__, "gpu": torch.cuda.get_device_name(DEV) if CUDA else "cpu"}


def sync():
    if CUDA:
        torch.cuda.synchronize(DEV)


def free():
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()


def reset_peak():
    if CUDA:
        torch.cuda.reset_peak_memory_stats(DEV)


def peak():
    return torch.cuda.max_memory_allocated(DEV) if CUDA else None


def timed(fn, runs, warmup):
    """Median wall time of `runs` calls after `warmup` calls, each fenced by a device sync."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(runs):
        sync()
        t = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def rel_err(x, ref):
    return ((x.float() - ref).norm() / ref.norm()).item()


def log(msg):
    print(f"diffusers_bench: {msg}", flush=True)


# Imported after argument parsing, so a bad flag fails before the slow imports.
from diffusers import AutoencoderKLWan, WanTransformer3DModel
from transformers import UMT5EncoderModel

os.makedirs(A.out, exist_ok=True)
tdir = os.path.join(A.model, "transformer")
with open(os.path.join(tdir, "config.json")) as f:
    tcfg = json.load(f)
z, text_dim = tcfg["in_channels"], tcfg["text_dim"]
g = torch.Generator().manual_seed(A.seed)
shape = [1, z, (A.frames - 1) // 4 + 1, A.height // 8, A.width // 8]
inputs = {"latents": torch.randn(shape, generator=g), "timestep": torch.tensor([500.0]),
          "context": torch.randn([1, 512, text_dim], generator=g), "vae_latents": torch.randn(shape, generator=g)}
save_file(inputs, os.path.join(A.out, "inputs.safetensors"))
log(f"inputs: latents {shape}, context [1, 512, {text_dim}]")
# The fp32 reference is strict fp32 (no TF32 in matmuls or convs); later phases restore defaults.
TF32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
R["default_tf32_matmul"], R["default_tf32_cudnn"] = TF32


def load_transformer(dtype):
    free()
    t = time.perf_counter()
    # from_pretrained(dtype=bf16) keeps _keep_in_fp32_modules (time embedder, norms,
    # scale_shift_table) in fp32, as a diffusers user gets it.
    m = WanTransformer3DModel.from_pretrained(tdir, dtype=dtype).to(DEV).eval()
    sync()
    return m, time.perf_counter() - t


def forward_fn(model, dtype):
    x, t, c = (inputs[k].to(DEV) for k in ("latents", "timestep", "context"))
    x, c = x.to(dtype), c.to(dtype)  # as WanPipeline casts latents and prompt embeds
    return lambda: model(hidden_states=x, timestep=t, encoder_hidden_states=c, return_dict=False)[0]


with torch.inference_mode():
    # --- transformer, fp32 (the reference) ---
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    R["fp32_forward_tf32"] = False  # so fp32_forward_s is strict fp32, slower than TF32 would be
    m, R["fp32_load_s"] = load_transformer(torch.float32)
    reset_peak()
    R["fp32_forward_s"], v = timed(forward_fn(m, torch.float32), max(A.fp32_runs, 1), 1)
    R["fp32_forward_peak_bytes"] = peak()
    ref = v.float().cpu()
    R["fp32_velocity_std"] = ref.std().item()  # ~0 would mean degenerate weights
    save_file({"velocity": ref.contiguous()}, os.path.join(A.out, "ref_fp32.safetensors"))
    log(f"fp32 eager forward {R['fp32_forward_s']:.3f} s")
    del m, v
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = TF32

    # --- transformer, bf16 eager, then per SDPA backend, then torch.compile ---
    m, R["bf16_load_s"] = load_transformer(torch.bfloat16)
    R["bf16_model_fp32_params"] = sum(p.numel() for p in m.parameters() if p.dtype == torch.float32)
    fwd = forward_fn(m, torch.bfloat16)
    reset_peak()
    R["bf16_eager_forward_s"], v = timed(fwd, A.runs, 2)
    R["bf16_eager_forward_peak_bytes"] = peak()
    save_file({"velocity": v.float().cpu().contiguous()}, os.path.join(A.out, "ref_bf16.safetensors"))
    R["bf16_eager_rel_err"] = rel_err(v.cpu(), ref)
    log(f"bf16 eager forward {R['bf16_eager_forward_s']:.3f} s, rel err vs fp32 {R['bf16_eager_rel_err']:.3e}")
    del v
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, be in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        key = f"bf16_sdpa_{name}_forward_s"
        try:
            with sdpa_kernel(be):
                R[key], _ = timed(fwd, 1, 1)
            log(f"bf16 eager forward, SDPA {name}: {R[key]:.3f} s")
        except RuntimeError as e:  # the backend cannot run this shape/dtype/device
            R[key] = None
            log(f"SDPA {name} unavailable: {str(e).splitlines()[0][:160]}")
    if not A.skip_compile:
        cm = torch.compile(m)
        cfwd = forward_fn(cm, torch.bfloat16)
        reset_peak()
        sync()
        t = time.perf_counter()
        cfwd()
        sync()
        R["compile_s"] = time.perf_counter() - t  # first call: tracing + inductor + one forward
        R["bf16_compile_forward_s"], v = timed(cfwd, A.runs, 1)
        R["bf16_compile_forward_peak_bytes"] = peak()
        R["bf16_compile_rel_err"] = rel_err(v.cpu(), ref)
        log(f"compile {R['compile_s']:.1f} s, bf16 compiled forward {R['bf16_compile_forward_s']:.3f} s")
        del cm, cfwd, v
        torch._dynamo.reset()
    del m, fwd

    # --- text encoder, bf16 as WanPipeline loads it, on 512 tokens ---
    free()
    enc = UMT5EncoderModel.from_pretrained(os.path.join(A.model, "text_encoder"), dtype=torch.bfloat16).to(DEV)
    enc.eval()
    ids = torch.randint(2, enc.config.vocab_size, (1, 512), generator=g).to(DEV)
    mask = torch.ones_like(ids)
    reset_peak()
    R["text_encode_s"], _ = timed(lambda e=enc: e(ids, attention_mask=mask).last_hidden_state, A.runs, 2)
    R["text_encode_peak_bytes"] = peak()
    log(f"text encode {R['text_encode_s']:.4f} s")
    del enc

    # --- VAE decode of vae_latents, fp32 then bf16 ---
    outs = {}
    for name, dtype in [("fp32", torch.float32), ("bf16", torch.bfloat16)]:
        free()
        vae = AutoencoderKLWan.from_pretrained(os.path.join(A.model, "vae"), dtype=dtype).to(DEV).eval()
        lat = inputs["vae_latents"].to(DEV, dtype)
        reset_peak()
        R[f"vae_decode_{name}_s"], o = timed(lambda v=vae, x=lat: v.decode(x, return_dict=False)[0],
                                             max(A.vae_runs, 1), 1)
        R[f"vae_decode_{name}_peak_bytes"] = peak()
        outs[name] = o.float().cpu()
        log(f"VAE decode {name} {R[f'vae_decode_{name}_s']:.3f} s, output {list(o.shape)}")
        del o, lat, vae
    mse = (outs["bf16"] - outs["fp32"]).pow(2).mean().item()
    R["vae_bf16_psnr_db"] = 10 * math.log10(4.0 / mse) if mse > 0 else float("inf")  # peak-to-peak 2 in [-1, 1]
    log(f"VAE bf16 vs fp32 PSNR {R['vae_bf16_psnr_db']:.2f} dB")
    del outs

# --- whole clip through WanPipeline (bf16, VAE fp32 as diffusers' Wan examples load it) ---
if A.clip_steps > 0:
    from diffusers import WanPipeline
    free()
    vae = AutoencoderKLWan.from_pretrained(os.path.join(A.model, "vae"), dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(A.model, vae=vae, dtype=torch.bfloat16).to(DEV)
    pipe.set_progress_bar_config(disable=True)
    marks = {}

    def first_forward(_mod, _args):
        if "start" not in marks:
            sync()
            marks["start"] = time.perf_counter()

    def step_end(_pipe, _i, _t, kw):
        sync()
        marks["end"] = time.perf_counter()
        return kw

    hook = pipe.transformer.register_forward_pre_hook(first_forward)
    reset_peak()
    sync()
    t = time.perf_counter()
    pipe(prompt="a red circle moving left on a white background", height=A.height, width=A.width,
         num_frames=A.frames, num_inference_steps=A.clip_steps, guidance_scale=5.0, output_type="latent",
         generator=torch.Generator(DEV).manual_seed(A.seed), callback_on_step_end=step_end)
    sync()
    R["clip_total_s"] = time.perf_counter() - t
    R["clip_denoise_s"] = marks["end"] - marks["start"]
    R["clip_steps"] = A.clip_steps
    R["clip_step_s"] = R["clip_denoise_s"] / A.clip_steps
    R["clip_peak_bytes"] = peak()
    hook.remove()
    log(f"clip {A.clip_steps} steps: total {R['clip_total_s']:.2f} s, denoise {R['clip_denoise_s']:.2f} s")
    del pipe, vae

with open(os.path.join(A.out, "diffusers.json"), "w") as f:
    json.dump(R, f, indent=1)
print(json.dumps(R, indent=1))
