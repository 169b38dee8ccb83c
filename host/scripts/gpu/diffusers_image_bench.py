#!/usr/bin/env python3
"""diffusers' FLUX.2 [klein] (4B) and Qwen-Image (20B) pipelines with RANDOM weights (built from
configs on the device, no download), timed as the pipelines run them:

- `transformer_forward`: one transformer call at the pipeline's shapes (FLUX.2: (H/16)(W/16)
  packed tokens of 128 channels, 512 text tokens of 7680, ids from the pipeline's own
  `_prepare_latent_ids`/`_prepare_text_ids`; Qwen-Image: (H/16)(W/16) tokens of 64, 128 text
  tokens, img_shapes [[(1, H/16, W/16)]]), median of --runs after 2 warm-up calls;
- `step`: FLUX.2 (distilled) = one forward; Qwen-Image (true CFG) = cond (128 text tokens) and
  uncond (16) forwards, the norm-rescaled combination; both then the Euler update;
- `end_to_end`: `pipe(prompt, height, width, num_inference_steps=--steps, latents=fixed,
  output_type="pil")` (Qwen-Image: negative_prompt=" ", true_cfg_scale=4), median of --runs after
  one warm-up, with the peak allocated memory of the measured runs; `end_to_end_edit` (--edit)
  the same with one 1024x1024 reference picture (FLUX.2 `image=[...]`; `QwenImageEditPipeline`).
Each eager, then again with regional torch.compile (every block of `transformer_blocks` and, for
FLUX.2, `single_transformer_blocks`, fullgraph=False) unless --no-compile; the first compiled
forwards are reported as `compile_warmup_s`.

    python3 diffusers_image_bench.py --family flux2|qwenimage [--height 1024 --width 1024 --steps 4
        --runs 3 --no-compile --edit --device cuda]
    python3 diffusers_image_bench.py --family qwenimage --tiny --device cpu --height 64 --width 64
        --steps 2 --runs 1 --no-compile [--edit]

--tiny builds tiny configs (CPU smoke test). bfloat16 on cuda, float32 on cpu (--dtype overrides).
The tokenizer is the tiny tests/fixtures/tiny-qwen3 (prompts have few tokens; FLUX.2 pads to 512).
Qwen-Image edit: diffusers 0.42.1 drops the processor's `mm_token_type_ids` (diffusers #14194),
which with transformers 5 silently changes the text encoder's positions (not its cost); the
`edit_note` line records it, and an exception there is printed as an `error` line.
Prints one JSON line per measurement on stdout (seconds, bytes); progress on stderr.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
p = argparse.ArgumentParser()
p.add_argument("--family", choices=["flux2", "qwenimage"], required=True)
p.add_argument("--height", type=int, default=1024)
p.add_argument("--width", type=int, default=1024)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--runs", type=int, default=3)
p.add_argument("--no-compile", action="store_true")
p.add_argument("--tiny", action="store_true")
p.add_argument("--edit", action="store_true")
p.add_argument("--device", default="cuda")
p.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto", help="auto: bf16 on cuda, fp32 on cpu")
p.add_argument("--tokenizer", default=os.path.join(HERE, "..", "..", "..", "tests", "fixtures", "tiny-qwen3"))
p.add_argument("--prompt", default="a red fox jumps over the lazy dog in a snowy forest at dawn")
a = p.parse_args()

DEV = torch.device(a.device)
CUDA = DEV.type == "cuda"
DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(a.dtype, torch.bfloat16 if CUDA else torch.float32)
BASE = {"family": a.family, "tiny": a.tiny, "height": a.height, "width": a.width, "steps": a.steps, "runs": a.runs,
        "dtype": str(DTYPE).replace("torch.", ""), "device": torch.cuda.get_device_name(DEV) if CUDA else "cpu",
        "torch": torch.__version__}


def log(*msg):
    print(f"[{time.strftime('%H:%M:%S')}]", *msg, file=sys.stderr, flush=True)


def emit(**kw):
    print(json.dumps({**BASE, **kw}), flush=True)


def sync():
    if CUDA:
        torch.cuda.synchronize(DEV)


def free():
    import gc
    gc.collect()
    if CUDA:
        torch.cuda.empty_cache()


def reset_peak():
    if CUDA:
        torch.cuda.reset_peak_memory_stats(DEV)


def peak():
    return torch.cuda.max_memory_allocated(DEV) if CUDA else None


def timed(fn, runs, warmup=0):
    """(median of `runs` timed calls, [warm-up call times]); CUDA-synchronised around each call."""
    warm, out = [], []
    for i in range(warmup + runs):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        (warm if i < warmup else out).append(time.perf_counter() - t0)
    return statistics.median(out), warm


@torch.no_grad()
def randomize(module):
    """Small normal noise for matrices/convs (std 0.02), norm scales at 1, biases at 0."""
    for name, prm in module.named_parameters():
        if prm.squeeze().ndim >= 2:
            prm.normal_(0.0, 0.02)
        elif name.endswith(("weight", "gamma", "scale")):
            prm.fill_(1.0)
        else:
            prm.zero_()
    return module.eval().requires_grad_(False)


def make(cls, *args, **kw):
    """Construct directly on the device in the bench dtype, then randomize."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    try:
        with DEV:
            m = cls(*args, **kw)
    finally:
        torch.set_default_dtype(old)
    if any(x.dtype != DTYPE for x in m.parameters()):  # no blanket .to(dtype): fp32 rope buffers stay fp32
        m.to(DTYPE)
    return randomize(m)


def build():
    from diffusers import FlowMatchEulerDiscreteScheduler
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    if a.family == "flux2":
        from diffusers import AutoencoderKLFlux2, Flux2KleinPipeline, Flux2Transformer2DModel
        from transformers import Qwen3Config, Qwen3ForCausalLM
        if a.tiny:  # 28 text layers: the pipeline reads hidden states 9, 18, 27.
            text = dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=28,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=1024)
            tcfg = dict(in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16, num_attention_heads=2,
                        joint_attention_dim=96, timestep_guidance_channels=32, axes_dims_rope=(4, 4, 4, 4))
            vcfg = dict(block_out_channels=(8, 16, 16, 16), down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, layers_per_block=1, latent_channels=4,
                        norm_num_groups=4)
        else:  # FLUX.2-klein-4B and its Qwen3-4B text encoder.
            text = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960)
            tcfg = dict(in_channels=128, num_layers=5, num_single_layers=20, attention_head_dim=128,
                        num_attention_heads=24, joint_attention_dim=7680, timestep_guidance_channels=256,
                        axes_dims_rope=(32, 32, 32, 32))
            vcfg = {}
        text_encoder = make(Qwen3ForCausalLM, Qwen3Config(**text, rms_norm_eps=1e-6, rope_theta=1e6,
                                                          tie_word_embeddings=True, hidden_act="silu"))
        transformer = make(Flux2Transformer2DModel, patch_size=1, mlp_ratio=3.0, rope_theta=2000,
                           guidance_embeds=False, **tcfg)
        vae = make(AutoencoderKLFlux2, **vcfg)
        sched = FlowMatchEulerDiscreteScheduler(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096,
                                                max_shift=1.15, shift=3.0, time_shift_type="exponential",
                                                use_dynamic_shifting=True)
        return Flux2KleinPipeline(scheduler=sched, vae=vae, text_encoder=text_encoder, tokenizer=tok,
                                  transformer=transformer, is_distilled=True)
    from diffusers import AutoencoderKLQwenImage, QwenImagePipeline, QwenImageTransformer2DModel
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    special = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
    tok.add_special_tokens({"additional_special_tokens": special})
    ids = dict(zip(special, tok.convert_tokens_to_ids(special)))
    if a.tiny:
        text = dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=1, max_position_embeddings=4096, mrope_section=[2, 3, 3], bos_token_id=None,
                    eos_token_id=None)
        vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=32,
                      fullatt_block_indexes=[1])
        tcfg = dict(in_channels=16, out_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
                    joint_attention_dim=32, axes_dims_rope=(4, 6, 6))
        vcfg = dict(base_dim=8, z_dim=4, dim_mult=[1, 2, 4, 4], num_res_blocks=1,
                    temperal_downsample=[False, True, True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
    else:  # Qwen-Image (diffusers defaults) and Qwen2.5-VL-7B.
        text = dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                    num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=128000,
                    mrope_section=[16, 24, 24])
        vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, out_hidden_size=3584,
                      fullatt_block_indexes=[7, 15, 23, 31])
        tcfg, vcfg = {}, {}
    sec = text.pop("mrope_section")
    cfg = Qwen2_5_VLConfig(
        text_config=dict(**text, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False, hidden_act="silu",
                         rope_scaling={"type": "mrope", "mrope_section": sec}),
        vision_config=dict(**vision, patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           in_channels=3),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|image_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"])
    text_encoder = make(Qwen2_5_VLForConditionalGeneration, cfg)
    transformer = make(QwenImageTransformer2DModel, **tcfg)
    vae = make(AutoencoderKLQwenImage, **vcfg)
    sched = FlowMatchEulerDiscreteScheduler(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=8192,
                                            max_shift=0.9, shift=1.0, shift_terminal=0.02,
                                            time_shift_type="exponential", use_dynamic_shifting=True)
    return QwenImagePipeline(scheduler=sched, vae=vae, text_encoder=text_encoder, tokenizer=tok,
                             transformer=transformer)


def edit_pipeline(pipe):
    if a.family == "flux2":
        return pipe  # Flux2KleinPipeline takes `image=[...]` itself.
    from diffusers import QwenImageEditPipeline
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor, Qwen2VLVideoProcessor
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=pipe.tokenizer,
                                 video_processor=Qwen2VLVideoProcessor())
    return QwenImageEditPipeline(scheduler=pipe.scheduler, vae=pipe.vae, text_encoder=pipe.text_encoder,
                                 tokenizer=pipe.tokenizer, processor=processor, transformer=pipe.transformer)


log(f"building {a.family} ({'tiny' if a.tiny else 'published sizes'}) on {DEV} in {DTYPE}")
torch.manual_seed(0)
t0 = time.perf_counter()
pipe = build()
pipe.set_progress_bar_config(disable=True)
sync()
tr = pipe.transformer
count = {k: sum(x.numel() for x in getattr(pipe, k).parameters()) for k in ("transformer", "text_encoder", "vae")}
emit(measure="build", seconds=time.perf_counter() - t0, params=count,
     allocated_bytes=torch.cuda.memory_allocated(DEV) if CUDA else None,
     text_attn=getattr(pipe.text_encoder.config, "_attn_implementation", None))
log("built", count)

h, w = a.height // 16, a.width // 16  # tokens: 8x VAE then 2x2 packing for both families (tiny too)
n_tok, in_ch = h * w, tr.config.in_channels
g = torch.Generator().manual_seed(1)
if a.family == "flux2":
    latents = torch.randn(1, in_ch, h, w, generator=g)  # the pipeline's layout; it packs them itself
else:
    latents = torch.randn(1, n_tok, in_ch, generator=g)  # already packed
latents = latents.to(DEV, DTYPE)
ref = Image.fromarray(np.random.default_rng(2).integers(0, 256, (1024, 1024, 3), dtype=np.uint8), "RGB")


def forward_inputs():
    """(cond kwargs, uncond kwargs or None) at the pipeline's shapes."""
    gi = torch.Generator().manual_seed(3)
    rnd = lambda *s: torch.randn(*s, generator=gi).to(DEV, DTYPE)  # noqa: E731
    ts = torch.full((1,), 0.9, device=DEV, dtype=DTYPE)
    if a.family == "flux2":
        lat = rnd(1, in_ch, h, w)
        ctx = rnd(1, 512, tr.config.joint_attention_dim)
        kw = dict(hidden_states=pipe._pack_latents(lat), encoder_hidden_states=ctx, timestep=ts, guidance=None,
                  img_ids=pipe._prepare_latent_ids(lat).to(DEV), txt_ids=pipe._prepare_text_ids(ctx).to(DEV),
                  return_dict=False)
        return kw, None
    jd = tr.config.joint_attention_dim
    base = dict(hidden_states=rnd(1, n_tok, in_ch), timestep=ts, img_shapes=[[(1, h, w)]],
                encoder_hidden_states_mask=None, return_dict=False)
    return {**base, "encoder_hidden_states": rnd(1, 128, jd)}, {**base, "encoder_hidden_states": rnd(1, 16, jd)}


def step_fn(cond, uncond, dt=-0.25, cfg=4.0):
    def step():
        lat = cond["hidden_states"]
        pred = tr(**cond)[0][:, :lat.shape[1]]
        if uncond is not None:  # Qwen-Image's true CFG with the norm rescale
            neg = tr(**uncond)[0]
            comb = neg + cfg * (pred - neg)
            pred = comb * (torch.norm(pred, dim=-1, keepdim=True) / torch.norm(comb, dim=-1, keepdim=True))
        return (lat.float() + dt * pred.float()).to(lat.dtype)  # FlowMatchEuler's update, in float32
    return step


def bench_transformer(mode):
    cond, uncond = forward_inputs()
    extra = {"image_tokens": n_tok, "text_tokens": cond["encoder_hidden_states"].shape[1]}
    with torch.no_grad():
        reset_peak()
        fwd, warm = timed(lambda: tr(**cond), a.runs, warmup=2)
        row = dict(measure="transformer_forward", mode=mode, seconds=fwd, warmup_s=warm, peak_allocated_bytes=peak(),
                   **extra)
        uw = [0.0]
        if uncond is not None:  # the uncond branch's own shape (16 text tokens) compiles before the step
            uw = timed(lambda: tr(**uncond), 1, warmup=1)[1]
        if mode == "compile":  # first call of each shape: dynamo + inductor
            row["compile_warmup_s"] = warm[0] + uw[0]
        emit(**row)
        log(f"{mode} forward {fwd:.4f}s (warm-up {[round(x, 3) for x in warm]})")
        reset_peak()
        st, _ = timed(step_fn(cond, uncond), a.runs, warmup=1)
        emit(measure="step", mode=mode, seconds=st, forwards_per_step=1 if uncond is None else 2,
             peak_allocated_bytes=peak(), uncond_text_tokens=None if uncond is None else 16, **extra)
        log(f"{mode} step {st:.4f}s")
    del cond, uncond
    free()


def bench_pipeline(mode, measure, pp, **extra):
    kw = dict(prompt=a.prompt, height=a.height, width=a.width, num_inference_steps=a.steps, output_type="pil")
    if a.family == "flux2":
        kw["guidance_scale"] = 1.0  # distilled: no CFG (and no warning)
    else:
        kw.update(negative_prompt=" ", true_cfg_scale=4.0)
    call = lambda: pp(**kw, **extra, latents=latents.clone())  # noqa: E731
    try:
        with torch.no_grad():
            sync()
            t0 = time.perf_counter()
            out = call()
            sync()
            warm = time.perf_counter() - t0
            reset_peak()
            med, _ = timed(call, a.runs)
        size = out.images[0].size
        emit(measure=measure, mode=mode, seconds=med, warmup_s=warm, peak_allocated_bytes=peak(), image_size=size)
        log(f"{mode} {measure} {med:.3f}s (warm-up {warm:.3f}s)")
    except Exception as e:  # the Qwen-Image edit path with transformers 5 (diffusers #14194)
        if measure != "end_to_end_edit":
            raise
        emit(measure=measure, mode=mode, error=f"{type(e).__name__}: {e}"[:2000])
        log(f"{mode} {measure} failed: {type(e).__name__}: {e}")
    free()


def run_all(mode):
    bench_transformer(mode)
    bench_pipeline(mode, "end_to_end", pipe)
    if a.edit:
        bench_pipeline(mode, "end_to_end_edit", edit, image=[ref] if a.family == "flux2" else ref)


edit = edit_pipeline(pipe) if a.edit else None
if edit is not None:
    edit.set_progress_bar_config(disable=True)
if a.edit and a.family == "qwenimage":  # does the processor's mm_token_type_ids reach the text encoder?
    import inspect
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as qe
    emit(measure="edit_note", processor_returns_mm_token_type_ids="mm_token_type_ids" in edit.processor(
        text=["<|vision_start|><|image_pad|><|vision_end|>x"], images=ref, return_tensors="pt"),
        pipeline_forwards_mm_token_type_ids="mm_token_type_ids" in inspect.getsource(qe))

run_all("eager")
if not a.no_compile:
    log("regional torch.compile of the repeated blocks (fullgraph=False)")
    for name in ("transformer_blocks", "single_transformer_blocks"):
        for blk in getattr(tr, name, []):
            blk.compile(fullgraph=False)  # in place: the ModuleList keeps the block, its forward compiled
    run_all("compile")
log("done")
