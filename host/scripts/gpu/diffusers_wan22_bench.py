#!/usr/bin/env python3
"""diffusers' side of the Wan 2.2 benchmark (host/scripts/gpu/wan22_bench.sh), on one random-weight
folder of make_wan22.py.

--kind a14b (two experts): the eager bf16 forward and CFG step of expert 0 (`transformer`, the
high-noise one), the low-noise expert's forward (`transformer_2`), the two experts alternating
(expert 0 then expert 1, per forward), the peak memory with both experts resident (after loading
both, and after their forwards), then torch.compile of expert 0 alone (both experts have one
architecture, so its compiled figures stand for both).
--kind ti2v (TI2V-5B): the forward and CFG step eager and compiled, then the Wan 2.2 VAE's decode
of `vae_latents` in bf16 and in float32, time and peak memory each.

Writes the forward's inputs under diffusers' argument names (`fastvideo bench --inputs` reads
them) with the latents the VAE decode times, the bf16 eager velocity of expert 0, and a JSON of
figures rewritten after each phase (the most important first), so a call cut by its time limit
keeps what finished.

    python3 diffusers_wan22_bench.py --model DIR --kind a14b|ti2v --out DIR [--frames 81 --height 480 --width 832]
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
P.add_argument("--kind", choices=["a14b", "ti2v"], required=True)
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
R = {"kind": A.kind, "frames": A.frames, "height": A.height, "width": A.width, "torch": torch.__version__,
     "gpu": torch.cuda.get_device_name(DEV) if CUDA else "cpu"}


B = Bench(DEV, "diffusers_wan22_bench", os.path.join(A.out, "diffusers_wan22.json"), R)
sync, free, peak, timed, log, dump = B.sync, B.free, B.peak, B.timed, B.log, B.dump


def read(*path):
    with open(os.path.join(A.model, *path)) as f:
        return json.load(f)


from diffusers import AutoencoderKLWan, WanTransformer3DModel  # noqa: E402

os.makedirs(A.out, exist_ok=True)
index, tcfg, vcfg = read("model_index.json"), read("transformer", "config.json"), read("vae", "config.json")
two = index.get("boundary_ratio") is not None and index.get("transformer_2", [None])[0] is not None
if two != (A.kind == "a14b") or bool(index.get("expand_timesteps")) != (A.kind == "ti2v"):
    raise SystemExit(f"{A.model} is not a {A.kind} folder (boundary_ratio {index.get('boundary_ratio')}, "
                     f"expand_timesteps {index.get('expand_timesteps')}): build it with make_wan22.py --kind {A.kind}")
sf, tf = vcfg.get("scale_factor_spatial") or 8, vcfg.get("scale_factor_temporal") or 4
grid = [(A.frames - 1) // tf + 1, A.height // sf, A.width // sf]
g = torch.Generator().manual_seed(A.seed)
inputs = {
    "hidden_states": torch.randn([1, tcfg["in_channels"], *grid], generator=g),
    "timestep": torch.tensor([500.0]),
    "encoder_hidden_states": torch.randn([1, 512, tcfg["text_dim"]], generator=g),
    "vae_latents": torch.randn([1, vcfg["z_dim"], *grid], generator=g),
}
save_file(inputs, os.path.join(A.out, "inputs.safetensors"))
log(f"inputs: hidden_states {list(inputs['hidden_states'].shape)}, vae_latents {list(inputs['vae_latents'].shape)}")
if A.inputs_only:
    raise SystemExit(0)
for stale in ("ref_bf16.safetensors", "diffusers_wan22.json"):  # an earlier run's must not pass for this one's
    if os.path.exists(os.path.join(A.out, stale)):
        os.remove(os.path.join(A.out, stale))


def load(part):
    t = time.perf_counter()
    m = WanTransformer3DModel.from_pretrained(os.path.join(A.model, part), dtype=torch.bfloat16).to(DEV).eval()
    sync()
    return m, time.perf_counter() - t


with torch.inference_mode():
    free()
    m, R["bf16_load_s"] = load("transformer")
    x, ts, c = (inputs[k].to(DEV) for k in ("hidden_states", "timestep", "encoder_hidden_states"))
    x, c = x.to(torch.bfloat16), c.to(torch.bfloat16)
    u = torch.zeros_like(c)

    def fwd_of(model):
        def one(ctx):
            return model(hidden_states=x, timestep=ts, encoder_hidden_states=ctx, return_dict=False)[0]

        def cfg_step():
            cond, uncond = one(c), one(u)
            return uncond + 5.0 * (cond - uncond)
        return (lambda: one(c)), cfg_step

    # Expert 0 (the only transformer of ti2v) eager: the reference velocity.
    fwd, cfg = fwd_of(m)
    free()
    R["bf16_eager_forward_s"], v = timed(fwd, A.runs, 1)
    R["bf16_eager_forward_peak_bytes"] = peak()
    save_file({"velocity": v.float().cpu().contiguous()}, os.path.join(A.out, "ref_bf16.safetensors"))
    R["bf16_eager_cfg_step_s"], _ = timed(cfg, A.runs, 0)
    log(f"bf16 eager forward {R['bf16_eager_forward_s']:.3f} s, CFG step {R['bf16_eager_cfg_step_s']:.3f} s")
    dump()
    del v

    if A.kind == "a14b":
        # The low-noise expert beside the first: both resident, as a two-expert pipeline keeps them.
        free()
        m2, R["bf16_load_2_s"] = load("transformer_2")
        R["both_experts_loaded_bytes"] = torch.cuda.memory_allocated(DEV) if CUDA else None
        R["both_experts_load_peak_bytes"] = peak()
        fwd2, _ = fwd_of(m2)
        R["bf16_eager_expert_2_forward_s"], _ = timed(fwd2, A.runs, 1)
        # Expert 0 then expert 1, per forward: what a step at the boundary pays for switching.
        pair, _ = timed(lambda: (fwd(), fwd2())[1], A.runs, 1)
        R["bf16_eager_switch_forward_s"] = pair / 2
        R["both_experts_forward_peak_bytes"] = peak()
        gib = (lambda b: f"{b / 2**30:.1f} GiB" if b else "-")
        log(f"bf16 eager low-noise expert forward {R['bf16_eager_expert_2_forward_s']:.3f} s, alternating "
            f"{R['bf16_eager_switch_forward_s']:.3f} s per forward, both experts resident: "
            f"{gib(R['both_experts_loaded_bytes'])} loaded, {gib(R['both_experts_forward_peak_bytes'])} peak")
        dump()
        del m2, fwd2

    if not A.skip_compile:
        if A.kind == "a14b":
            R["compile_note"] = ("torch.compile of expert 0 (transformer) only: the two experts share one "
                                 "architecture, so its compiled figures stand for both")
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
        del cm, v, cfwd, ccfg_step
        torch._dynamo.reset()
    del m, fwd, cfg, x, c, u

    if A.kind == "ti2v":
        # The Wan 2.2 VAE's decode of the latents ours decodes, bf16 then float32.
        for name, dtype in [("bf16", torch.bfloat16), ("fp32", torch.float32)]:
            free()
            vae = AutoencoderKLWan.from_pretrained(os.path.join(A.model, "vae"), dtype=dtype).to(DEV).eval()
            z = inputs["vae_latents"].to(DEV, dtype)
            # (the video is dropped at once: the peak is one decode's)
            R[f"vae_decode_{name}_s"], _ = timed(lambda v=vae, z=z: v.decode(z).sample.shape, 1, 1)
            R[f"vae_decode_{name}_peak_bytes"] = peak()
            log(f"VAE decode {name} {R[f'vae_decode_{name}_s']:.3f} s")
            dump()
            del vae, z

dump()
print(json.dumps(R), flush=True)
