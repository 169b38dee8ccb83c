"""diffusers' Cosmos3OmniTransformer at a real shape with random weights, timed as the pipeline
runs it: one step = the cond forward then the uncond forward (each recomputes its prompt's
pass), eager and with regional torch.compile (`compile_repeated_blocks`). The same packed
shapes and positions as `fastvideo bench-cosmos3` (the pipeline's own position helpers).

    python3 diffusers_cosmos3_bench.py CONFIG --frames 61 --height 720 --width 1280 [--no-compile]

Prints one JSON line per mode.
"""
import argparse
import json
import math
import statistics
import time

import torch
from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import get_3d_mrope_ids_text_tokens, get_3d_mrope_ids_vae_tokens

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("--frames", type=int, default=61)
p.add_argument("--height", type=int, default=720)
p.add_argument("--width", type=int, default=1280)
p.add_argument("--fps", type=float, default=24.0)
p.add_argument("--prompt-len", type=int, default=256)
p.add_argument("--runs", type=int, default=3)
p.add_argument("--no-sound", action="store_true")
p.add_argument("--no-compile", action="store_true")
a = p.parse_args()

cfg = {k: v for k, v in json.load(open(a.config)).items() if not k.startswith("_")}
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = Cosmos3OmniTransformer(**cfg).eval()
torch.set_default_dtype(torch.float32)
model.time_embedder.float()

t, h, w = (a.frames - 1) // 4 + 1, a.height // 16, a.width // 16
hp, wp = math.ceil(h / 2), math.ceil(w / 2)
sound_len = 0 if a.no_sound else -(-int(a.frames / a.fps * 48000) // 1920)
vision = torch.randn(1, cfg["latent_channel"], t, h, w, device="cuda", dtype=torch.bfloat16)
sound = torch.randn(cfg["sound_dim"], sound_len, device="cuda", dtype=torch.bfloat16) if sound_len else None


def branch(und):
    text_pos, nxt = get_3d_mrope_ids_text_tokens(und, 0, use_float_positions=True)
    offset = nxt + cfg["unified_3d_mrope_temporal_modality_margin"]
    vis_pos, _ = get_3d_mrope_ids_vae_tokens(t, hp, wp, offset, True, fps=a.fps, base_fps=24.0,
                                             temporal_compression_factor=4)
    parts = [text_pos.float(), vis_pos.float()]
    nv = t * hp * wp
    kw = {}
    if sound is not None:
        snd_pos, _ = get_3d_mrope_ids_vae_tokens(sound_len, 1, 1, offset, True, fps=25.0, base_fps=24.0,
                                                 temporal_compression_factor=1)
        parts.append(snd_pos.float())
        idx = torch.arange(und + nv, und + nv + sound_len, device="cuda")
        kw = dict(sound_tokens=[sound], sound_token_shapes=[(sound_len, 1, 1)], sound_sequence_indexes=idx,
                  sound_mse_loss_indexes=idx, sound_timesteps=torch.full((sound_len,), 937, device="cuda"),
                  sound_noisy_frame_indexes=[torch.arange(sound_len, device="cuda")])
    vis_idx = torch.arange(und, und + nv, device="cuda")
    return dict(
        input_ids=torch.arange(und, device="cuda") * 7919 % cfg["vocab_size"], text_indexes=torch.arange(und, device="cuda"),
        position_ids=torch.cat(parts, 1).cuda(), und_len=und, sequence_length=und + nv + sound_len,
        vision_tokens=[vision], vision_token_shapes=[(t, hp, wp)], vision_sequence_indexes=vis_idx,
        vision_mse_loss_indexes=vis_idx, vision_timesteps=torch.full((nv,), 937, device="cuda"),
        vision_noisy_frame_indexes=[torch.arange(t, device="cuda")], return_dict=False, **kw)


cond, uncond = branch(a.prompt_len), branch(a.prompt_len // 2)


def timed(fn, runs):
    out = []
    for i in range(runs + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if i:
            out.append(time.perf_counter() - t0)
    return statistics.median(out)


def measure(mode):
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        t0 = time.perf_counter()
        model(**cond)
        model(**uncond)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        fwd = timed(lambda: model(**cond), a.runs)
        step = timed(lambda: (model(**cond), model(**uncond)), a.runs)
    print(json.dumps({"mode": mode, "gen_tokens": t * hp * wp + sound_len, "first_step_s": first, "forward_s": fwd,
                      "step_s": step, "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                      "device": torch.cuda.get_device_name()}), flush=True)


measure("eager")
if not a.no_compile:
    model.compile_repeated_blocks(fullgraph=True)
    measure("compile")
