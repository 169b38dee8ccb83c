#!/usr/bin/env python3
"""diffusers' LTX2Pipeline end to end on an LTX-2 folder (make_ltx2.py), eager and with regional
torch.compile of the transformer blocks (`compile_repeated_blocks`, as diffusers_ltx2_bench.py),
timed the way `fastvideo generate` reports itself: text encoding through the decoded video and
waveform, per denoise step, video decode, audio decode (audio VAE + vocoder), peak memory.

    python3 diffusers_ltx2_e2e.py DIR --frames 121 --height 512 --width 768 --steps 20
        [--two-stage | --recipe one|two|both] [--no-compile] [--runs 1] [--warmup-steps 2]
        [--device cuda] [--dtype bf16] [--deadline EPOCH_SECONDS]

Recipes, the same work as `fastvideo generate` and `fastvideo generate --two-stage`:
- one: `LTX2Pipeline(prompt, height, width, num_frames, num_inference_steps=steps)` with the
  pipeline's default guidance (CFG 3 / audio 7 with cond and uncond batched, the STG pass on
  block 28, the modality pass, rescale 0.7), output_type "np".
- two: diffusers' documented two-stage example as models/ltx2/src/refine.rs defines ours: stage
  one at half the height and width with `steps` steps and the default guidance (output_type
  "latent"), `LTX2LatentUpsamplePipeline` with DIR/latent_upsampler (x2), stage two at the full
  size on STAGE_2_DISTILLED_SIGMA_VALUES (a scheduler without dynamic shift or terminal
  stretch), re-noised to the first level (`noise_scale` 0.909375, our refine node's default),
  no guidance (one pass a step), the stage-one audio latents carried over; then both decodes.

Each (mode, recipe) runs once with --warmup-steps steps (the shapes of the timed runs: compiles
and cuDNN plans happen there), then --runs timed runs; one JSON line each, with medians over the
runs. Per-step seconds come from `callback_on_step_end` with a device sync (the first step from
the transformer's first forward); component seconds from wrappers that sync before and after.
`--deadline`: a (mode, recipe) not started by then is skipped (a line says so), so a device call
ends inside its limit with what it measured.
"""
import argparse
import json
import statistics
import sys
import time
from collections import defaultdict

P = argparse.ArgumentParser()
P.add_argument("model")
P.add_argument("--frames", type=int, default=121)
P.add_argument("--height", type=int, default=512)
P.add_argument("--width", type=int, default=768)
P.add_argument("--steps", type=int, default=20)
P.add_argument("--fps", type=float, default=24.0)
P.add_argument("--two-stage", action="store_true", help="the two-stage recipe (--recipe two)")
P.add_argument("--recipe", choices=["one", "two", "both"], default=None)
P.add_argument("--no-compile", action="store_true")
P.add_argument("--runs", type=int, default=1)
P.add_argument("--warmup-steps", type=int, default=2)
P.add_argument("--device", default="cuda")
P.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
P.add_argument("--seed", type=int, default=0)
P.add_argument("--prompt", default="a red ball bounces on a wooden floor and a bell rings")
P.add_argument("--deadline", type=float, default=None, help="epoch seconds after which no new measurement starts")
A = P.parse_args()
RECIPES = {"one": ["one"], "two": ["two"], "both": ["one", "two"]}[A.recipe or ("two" if A.two_stage else "one")]

# Imported after argument parsing, so a bad flag fails before the slow imports.
import torch  # noqa: E402
import diffusers  # noqa: E402
from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline  # noqa: E402
from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel  # noqa: E402
from diffusers.pipelines.ltx2.pipeline_ltx2_latent_upsample import LTX2LatentUpsamplePipeline  # noqa: E402
from diffusers.pipelines.ltx2.utils import STAGE_2_DISTILLED_SIGMA_VALUES  # noqa: E402

DEV = torch.device(A.device)
CUDA = DEV.type == "cuda"
DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32}[A.dtype]
STAGE_2 = list(STAGE_2_DISTILLED_SIGMA_VALUES)


def sync():
    if CUDA:
        torch.cuda.synchronize(DEV)


def log(msg):
    print(f"diffusers_ltx2_e2e: {msg}", file=sys.stderr, flush=True)


class Clock:
    """What one pipeline call spent where: accumulated component seconds and step boundaries."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.acc = defaultdict(float)
        self.calls = []  # per pipeline call: [first forward's start, each step's end...]

    def new_call(self):
        self.calls.append([])

    def mark(self):
        sync()
        self.calls[-1].append(time.perf_counter())

    def steps(self, i):
        c = self.calls[i]
        return [b - a for a, b in zip(c, c[1:])]


CLOCK = Clock()


def timed_attr(obj, attr, key):
    """Replaces `obj.attr` (a method, or a module's forward) by one that adds its synced seconds to `key`."""
    orig = getattr(obj, attr)

    def wrapper(*args, **kwargs):
        sync()
        t = time.perf_counter()
        out = orig(*args, **kwargs)
        sync()
        CLOCK.acc[key] += time.perf_counter() - t
        return out

    setattr(obj, attr, wrapper)


diffusers.utils.logging.disable_progress_bar()
try:
    import transformers
    transformers.utils.logging.disable_progress_bar()
except (ImportError, AttributeError):
    pass
t0 = time.perf_counter()
pipe = LTX2Pipeline.from_pretrained(A.model, dtype=DTYPE).to(DEV)
pipe.set_progress_bar_config(disable=True)
upsample_pipe = None
if "two" in RECIPES:
    up = LTX2LatentUpsamplerModel.from_pretrained(f"{A.model}/latent_upsampler", dtype=DTYPE).to(DEV)
    upsample_pipe = LTX2LatentUpsamplePipeline(vae=pipe.vae, latent_upsampler=up)
    upsample_pipe.set_progress_bar_config(disable=True)
sync()
LOAD_S = time.perf_counter() - t0
log(f"loaded {A.model} in {LOAD_S:.1f} s ({A.dtype} on {A.device})")

timed_attr(pipe, "encode_prompt", "text_encode")  # Gemma
timed_attr(pipe.connectors, "forward", "connectors")
timed_attr(pipe.vae, "decode", "video_decode")
timed_attr(pipe.audio_vae, "decode", "audio_vae")
timed_attr(pipe.vocoder, "forward", "vocoder")


def first_forward(_module, _args):
    if not CLOCK.calls[-1]:
        CLOCK.mark()


pipe.transformer.register_forward_pre_hook(first_forward)


def step_end(_pipe, _i, _t, kwargs):
    CLOCK.mark()
    return kwargs


def call(**kw):
    CLOCK.new_call()
    return pipe(prompt=A.prompt, num_frames=A.frames, frame_rate=A.fps, callback_on_step_end=step_end,
                return_dict=False, **kw)


def generator():
    return torch.Generator(DEV).manual_seed(A.seed)


def run_one(steps):
    return call(height=A.height, width=A.width, num_inference_steps=steps, output_type="np", generator=generator())


def run_two(steps):
    video, audio = call(height=A.height // 2, width=A.width // 2, num_inference_steps=steps, output_type="latent",
                        generator=generator())
    sync()
    t = time.perf_counter()
    video = upsample_pipe(latents=video, output_type="latent", return_dict=False)[0]
    sync()
    CLOCK.acc["upsample"] += time.perf_counter() - t
    base = pipe.scheduler
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_config(base.config, use_dynamic_shifting=False,
                                                                 shift_terminal=None)
    try:
        return call(height=A.height, width=A.width, latents=video, audio_latents=audio, sigmas=STAGE_2,
                    num_inference_steps=len(STAGE_2), noise_scale=STAGE_2[0], guidance_scale=1.0,
                    audio_guidance_scale=1.0, stg_scale=0.0, audio_stg_scale=0.0, modality_scale=1.0,
                    audio_modality_scale=1.0, guidance_rescale=0.0, audio_guidance_rescale=0.0, output_type="np",
                    generator=generator())
    finally:
        pipe.scheduler = base


RUN = {"one": run_one, "two": run_two}


def timed_run(recipe, steps):
    CLOCK.reset()
    sync()
    t = time.perf_counter()
    with torch.no_grad():
        frames, audio = RUN[recipe](steps)
    sync()
    e2e = time.perf_counter() - t
    r = dict(CLOCK.acc, e2e=e2e, steps=CLOCK.steps(0), calls=len(CLOCK.calls))
    if recipe == "two":
        r["refine_steps"] = CLOCK.steps(1)
    r["frames_shape"] = list(getattr(frames, "shape", [len(frames)]))
    r["audio_shape"] = list(audio.shape)
    return r


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def measure(mode, recipe):
    if A.deadline is not None and time.time() > A.deadline:
        print(json.dumps({"mode": mode, "recipe": recipe, "skipped": "deadline"}), flush=True)
        log(f"{mode} {recipe}: skipped, past the deadline")
        return
    t = time.perf_counter()
    timed_run(recipe, min(A.warmup_steps, A.steps))  # compiles, plans, allocator warm-up
    warm = time.perf_counter() - t
    log(f"{mode} {recipe}: warm-up ({min(A.warmup_steps, A.steps)} steps) {warm:.1f} s")
    if CUDA:
        torch.cuda.reset_peak_memory_stats(DEV)
    runs = [timed_run(recipe, A.steps) for _ in range(A.runs)]
    steps = [s for r in runs for s in r["steps"]]
    later = [s for r in runs for s in r["steps"][1:]] or steps
    o = {
        "mode": mode, "recipe": recipe, "frames": A.frames, "height": A.height, "width": A.width, "steps": A.steps,
        "runs": A.runs, "dtype": A.dtype, "device": torch.cuda.get_device_name(DEV) if CUDA else A.device,
        "torch": torch.__version__, "diffusers": diffusers.__version__,
        "e2e_s": med(r["e2e"] for r in runs),
        # Steps after the first of each run (the first pays what is lazy at a call's start), as
        # summarize_generate.py's step_p50_s; first_step_s separately.
        "step_s": med(later), "first_step_s": med(r["steps"][0] for r in runs),
        "denoise_s": med(sum(r["steps"]) for r in runs),
        "text_encode_s": med(r.get("text_encode", 0.0) + r.get("connectors", 0.0) for r in runs),
        "gemma_s": med(r.get("text_encode") for r in runs), "connectors_s": med(r.get("connectors") for r in runs),
        "video_decode_s": med(r.get("video_decode") for r in runs),
        "audio_decode_s": med(r.get("audio_vae", 0.0) + r.get("vocoder", 0.0) for r in runs),
        "audio_vae_s": med(r.get("audio_vae") for r in runs), "vocoder_s": med(r.get("vocoder") for r in runs),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(DEV) if CUDA else None,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(DEV) if CUDA else None,
        "warmup_s": warm, "load_s": LOAD_S, "frames_shape": runs[0]["frames_shape"],
        "audio_shape": runs[0]["audio_shape"],
    }
    if recipe == "two":
        o["base_size"] = [A.height // 2, A.width // 2]
        o["upsample_s"] = med(r.get("upsample") for r in runs)
        o["refine_step_s"] = med(s for r in runs for s in r["refine_steps"])
        o["refine_s"] = med(sum(r["refine_steps"]) for r in runs)
        o["refine_sigmas"] = STAGE_2
    print(json.dumps(o), flush=True)


for r in RECIPES:
    measure("eager", r)
if not A.no_compile:
    # Regional compilation of the 48 transformer blocks; more graph variants than dynamo's
    # default limit may come (batch 2 and 1, two token counts, the STG and isolated passes).
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    pipe.transformer.compile_repeated_blocks(fullgraph=True)
    for r in RECIPES:
        measure("compile", r)
