"""diffusers' LTX2VideoTransformer3DModel at a published shape with random weights, timed as
`LTX2Pipeline.__call__` runs one step with its default guidance: the conditional and
unconditional passes batched, the STG pass (block 28 perturbed) and the modality pass — eager
and with regional torch.compile (`compile_repeated_blocks`). The same shapes as
`fastvideo bench-ltx2`.

    python3 diffusers_ltx2_bench.py CONFIG --frames 121 --height 512 --width 768 [--no-compile]

Prints one JSON line per mode.
"""
import argparse
import json
import statistics
import time

import torch
from diffusers.models.transformers.transformer_ltx2 import LTX2VideoTransformer3DModel

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("--frames", type=int, default=121)
p.add_argument("--height", type=int, default=512)
p.add_argument("--width", type=int, default=768)
p.add_argument("--fps", type=float, default=24.0)
p.add_argument("--text-len", type=int, default=1024)
p.add_argument("--runs", type=int, default=3)
p.add_argument("--device", default="cuda")
p.add_argument("--no-compile", action="store_true")
a = p.parse_args()

cfg = {k: v for k, v in json.load(open(a.config)).items() if not k.startswith("_")}
dev = torch.device(a.device)
dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
torch.manual_seed(0)
torch.set_default_dtype(dtype)
with dev:
    model = LTX2VideoTransformer3DModel(**cfg).eval()
torch.set_default_dtype(torch.float32)
c = model.config
ft, fs = c.vae_scale_factors[0], c.vae_scale_factors[1]
f, h, w = (a.frames - 1) // ft + 1, a.height // fs, a.width // fs
n = f * h * w
rate = c.audio_sampling_rate / c.audio_hop_length / c.audio_scale_factor
na = round(a.frames / a.fps * rate)
# Each stream's text width: the caption width with caption projections (2.0), else its own (2.3).
with_projection = getattr(c, "use_prompt_embeddings", True)
widths = (c.caption_channels, c.caption_channels) if with_projection else (
    c.num_attention_heads * c.attention_head_dim, c.audio_num_attention_heads * c.audio_attention_head_dim)
stg_blocks = [b for b in [28] if b < c.num_layers]


def inputs(b):
    g = torch.Generator(device=dev).manual_seed(b)
    r = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=dtype)  # noqa: E731
    t = torch.full((b,), 937.0, device=dev)
    return dict(hidden_states=r(b, n, c.in_channels), audio_hidden_states=r(b, na, c.audio_in_channels),
                encoder_hidden_states=r(b, a.text_len, widths[0]),
                audio_encoder_hidden_states=r(b, a.text_len, widths[1]),
                encoder_attention_mask=torch.ones(b, a.text_len, device=dev),
                audio_encoder_attention_mask=torch.ones(b, a.text_len, device=dev),
                timestep=t, sigma=t, num_frames=f, height=h, width=w, fps=a.fps, audio_num_frames=na,
                use_cross_timestep=True, return_dict=False)


one, two = inputs(1), inputs(2)


def step():
    model(**two)
    model(**one, spatio_temporal_guidance_blocks=stg_blocks)
    model(**one, isolate_modalities=True)


def timed(fn, runs):
    out = []
    for _ in range(runs + 1):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out[1:])


def measure(mode):
    with torch.no_grad():
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        fwd = timed(lambda: model(**one), a.runs)
        stp = timed(step, a.runs)
        peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
    print(json.dumps({"mode": mode, "video_tokens": n, "audio_tokens": na, "forward_s": fwd, "step_s": stp,
                      "peak_allocated_bytes": peak}), flush=True)


measure("eager")
if not a.no_compile:
    model.compile_repeated_blocks(fullgraph=True)
    with torch.no_grad():
        step()  # compile outside the timing
    measure("compile")
