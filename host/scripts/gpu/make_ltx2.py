#!/usr/bin/env python3
"""Builds a random-weight LTX-2 (2.0) folder in diffusers' `LTX2Pipeline` layout, for benchmarks only.

    python3 make_ltx2.py OUT_DIR [--tiny] [--text-layers N] [--two-stage] [--device cuda|cpu]
        [--dtype bf16|fp32] [--shard-size 5GB] [--seed 0]

Every component has Lightricks/LTX-2's published shapes, as diffusers' conversion script
(`scripts/convert_ltx2_to_diffusers.py`, version "2.0") builds them:
- `transformer/`   LTX2VideoTransformer3DModel, ltx2_transformer_config.json beside this script
                   (48 blocks, 4096-wide video and 2048-wide audio streams: 18.9 B params, 37.7 GB in bf16)
- `text_encoder/`  Gemma3ForConditionalGeneration with gemma-3-12b's widths (3840 hidden, 15360 MLP,
                   16 query / 8 key-value heads of 256, 262,208-token table, SigLIP vision tower)
                   but only --text-layers of its 48 layers (default 2: 3.8 GB). The whole encoder
                   (--text-layers 48, 24.4 GB) beside the 37.7 GB transformer and the rest would
                   not fit the GPU machine's 64 GiB disk, so by default the text encode is timed
                   on 2 layers (about 1/20 of its published cost).
- `connectors/`    LTX2TextConnectors (2.0: 2+2 blocks of 30x128 heads, 128 registers, split rope);
                   `text_proj_in_factor` is the encoder's layers + 1 (49 when published), so the
                   stacked hidden states fit the encoder that is built
- `vae/`           AutoencoderKLLTX2Video (128 latent channels, x32 space, x8 time, non-causal decoder)
- `audio_vae/`     AutoencoderKLLTX2Audio (64 mel bins, 8 latent channels; the class defaults)
- `vocoder/`       LTX2Vocoder (24 kHz, x240 upsampling; the class defaults)
- `scheduler/`     FlowMatchEulerDiscreteScheduler as the conversion script configures it
- `tokenizer/`     the word-level tokenizer of tests/fixtures/tiny-ltx2 (nothing can be downloaded
                   on the GPU machine; its ids, < 26, are valid rows of the large embedding table)
- `latent_upsampler/` with --two-stage: LTX2LatentUpsamplerModel (x2 rational, 1024 middle
                   channels, 4 blocks per stage), which `fastvideo generate --two-stage` looks for
                   there (not listed in model_index.json, as our loader and diffusers' loader agree)

Weights are drawn by the classes' own initialisers on --device (the GPU when there is one),
directly in --dtype (bf16 by default, as the published folder), and written with each class's
save_pretrained in --shard-size shards; one component is in memory at a time. The folder is
built aside (OUT_DIR.partial) and renamed at the end, so it is whole or absent.
--tiny: the tiny shapes of tests/fixtures/make_ltx2_pipeline_fixtures.py (3 text layers by
default), for checking the plumbing on a CPU.
"""
import argparse
import json
import os
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tiny-ltx2", "tokenizer")

# --- published (Lightricks/LTX-2, diffusers' conversion script "2.0") ---
with open(os.path.join(HERE, "ltx2_transformer_config.json")) as f:
    TRANSFORMER = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
# gemma-3-12b(-it): the text config's published values; transformers 5 spells the two rope
# tables as rope_parameters (full attention: linear x8 on theta 1e6; sliding: theta 1e4).
GEMMA = dict(vocab_size=262208, hidden_size=3840, intermediate_size=15360, num_attention_heads=16,
             num_key_value_heads=8, head_dim=256, query_pre_attn_scalar=256, sliding_window=1024,
             hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=131072,
             rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
GEMMA_LAYERS = 48
SLIDING_PATTERN = 6  # every 6th layer attends globally, the others within the window
VISION = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16, image_size=896,
              patch_size=14, vision_use_head=False)
GEMMA_TOP = dict(mm_tokens_per_image=256, boi_token_index=255999, eoi_token_index=256000, image_token_index=262144)
CONNECTORS = dict(caption_channels=3840, video_connector_num_attention_heads=30, video_connector_attention_head_dim=128,
                  video_connector_num_layers=2, video_connector_num_learnable_registers=128,
                  audio_connector_num_attention_heads=30, audio_connector_attention_head_dim=128,
                  audio_connector_num_layers=2, audio_connector_num_learnable_registers=128,
                  connector_rope_base_seq_len=4096, rope_theta=10000.0, rope_double_precision=True,
                  causal_temporal_positioning=False, rope_type="split")
VIDEO_VAE = dict(in_channels=3, out_channels=3, latent_channels=128, block_out_channels=(256, 512, 1024, 2048),
                 down_block_types=("LTX2VideoDownBlock3D",) * 4, decoder_block_out_channels=(256, 512, 1024),
                 layers_per_block=(4, 6, 6, 2, 2), decoder_layers_per_block=(5, 5, 5, 5),
                 spatio_temporal_scaling=(True, True, True, True), decoder_spatio_temporal_scaling=(True, True, True),
                 decoder_inject_noise=(False, False, False, False),
                 downsample_type=("spatial", "temporal", "spatiotemporal", "spatiotemporal"),
                 upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=False,
                 patch_size=4, patch_size_t=1, resnet_norm_eps=1e-6, encoder_causal=True, decoder_causal=False,
                 encoder_spatial_padding_mode="zeros", decoder_spatial_padding_mode="reflect",
                 spatial_compression_ratio=32, temporal_compression_ratio=8)
AUDIO_VAE = dict(base_channels=128, output_channels=2, ch_mult=(1, 2, 4), num_res_blocks=2, attn_resolutions=None,
                 in_channels=2, resolution=256, latent_channels=8, norm_type="pixel", causality_axis="height",
                 dropout=0.0, mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160, is_causal=True,
                 mel_bins=64, double_z=True)
VOCODER = dict(in_channels=128, hidden_channels=1024, out_channels=2, upsample_kernel_sizes=[16, 15, 8, 4, 4],
               upsample_factors=[6, 5, 2, 2, 2], resnet_kernel_sizes=[3, 7, 11],
               resnet_dilations=[[1, 3, 5], [1, 3, 5], [1, 3, 5]], leaky_relu_negative_slope=0.1,
               output_sampling_rate=24000)
UPSAMPLER = dict(in_channels=128, mid_channels=1024, num_blocks_per_stage=4, dims=3, spatial_upsample=True,
                 temporal_upsample=False, rational_spatial_scale=2.0)
SCHEDULER = dict(base_image_seq_len=1024, base_shift=0.95, invert_sigmas=False, max_image_seq_len=4096,
                 max_shift=2.05, num_train_timesteps=1000, shift=1.0, shift_terminal=0.1, stochastic_sampling=False,
                 time_shift_type="exponential", use_beta_sigmas=False, use_dynamic_shifting=True,
                 use_exponential_sigmas=False, use_karras_sigmas=False)

# --- tiny (tests/fixtures/make_ltx2_pipeline_fixtures.py's shapes) ---
TINY_TRANSFORMER = dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=2,
                        attention_head_dim=8, cross_attention_dim=16, audio_in_channels=16, audio_out_channels=16,
                        audio_num_attention_heads=2, audio_attention_head_dim=4, audio_cross_attention_dim=8,
                        num_layers=30, caption_channels=12, vae_scale_factors=(2, 8, 8), pos_embed_max_pos=20,
                        audio_pos_embed_max_pos=20)
TINY_GEMMA = dict(hidden_size=12, intermediate_size=24, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                  sliding_window=4, query_pre_attn_scalar=8, max_position_embeddings=2048,
                  rope_parameters=GEMMA["rope_parameters"])
TINY_GEMMA_LAYERS = 3
TINY_SLIDING_PATTERN = 3
TINY_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                   patch_size=14)
TINY_CONNECTORS = dict(caption_channels=12, video_connector_num_attention_heads=2, video_connector_attention_head_dim=6,
                       video_connector_num_layers=2, video_connector_num_learnable_registers=4,
                       audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=6,
                       audio_connector_num_layers=1, audio_connector_num_learnable_registers=4,
                       connector_rope_base_seq_len=16)
TINY_VIDEO_VAE = dict(in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 16),
                      down_block_types=("LTX2VideoDownBlock3D", "LTX2VideoDownBlock3D"), layers_per_block=(1, 1, 1),
                      spatio_temporal_scaling=(True, True), downsample_type=("spatiotemporal", "spatiotemporal"),
                      decoder_block_out_channels=(8, 16), decoder_layers_per_block=(1, 1, 1),
                      decoder_spatio_temporal_scaling=(True, True), upsample_type=("spatiotemporal", "spatiotemporal"),
                      upsample_residual=(False, True), upsample_factor=(1, 2), patch_size=2, patch_size_t=1)
TINY_AUDIO_VAE = dict(base_channels=16, output_channels=2, ch_mult=(1, 2), num_res_blocks=1, latent_channels=4,
                      resolution=16, mel_bins=16)
TINY_VOCODER = dict(in_channels=32, hidden_channels=64, out_channels=2, upsample_kernel_sizes=[12, 10, 16],
                    upsample_factors=[6, 5, 8], resnet_kernel_sizes=[3], resnet_dilations=[[1, 2]])
TINY_UPSAMPLER = dict(in_channels=8, mid_channels=32, num_blocks_per_stage=1)

def layer_types(n, pattern):
    return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n)]


@torch.no_grad()
def cast_saved(m, dtype):
    """Tensors a class builds in float32 whatever the default (the upsampler's blur kernel) are
    saved in `dtype` too, as the conversion script's `.to(dtype)` saves them; buffers that are not
    saved (Gemma's rotary tables) are left alone."""
    saved = set(m.state_dict().keys())
    for name, t in list(m.named_parameters()) + list(m.named_buffers()):
        if name in saved and t.is_floating_point() and t.dtype != dtype:
            t.data = t.data.to(dtype)


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--text-layers", type=int, default=None,
                    help=f"Gemma layers built (published: {GEMMA_LAYERS}; default 2, tiny: {TINY_GEMMA_LAYERS})")
    ap.add_argument("--two-stage", action="store_true", help="also latent_upsampler/ (the two-stage recipe)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--shard-size", default=None, help='max_shard_size of save_pretrained (default "5GB"; tiny "100KB")')
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    # Imported after the arguments, so a bad flag fails before the slow imports.
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.models.autoencoders.autoencoder_kl_ltx2 import AutoencoderKLLTX2Video
    from diffusers.models.autoencoders.autoencoder_kl_ltx2_audio import AutoencoderKLLTX2Audio
    from diffusers.models.transformers.transformer_ltx2 import LTX2VideoTransformer3DModel
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    t0 = time.perf_counter()
    tiny = a.tiny
    layers = a.text_layers if a.text_layers is not None else (TINY_GEMMA_LAYERS if tiny else 2)
    if layers < 1:
        sys.exit("make_ltx2: --text-layers must be at least 1")
    shard = a.shard_size or ("100KB" if tiny else "5GB")
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    dev = torch.device(a.device)
    tmp = a.out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    gemma_text = dict(TINY_GEMMA if tiny else GEMMA, num_hidden_layers=layers,
                      layer_types=layer_types(layers, TINY_SLIDING_PATTERN if tiny else SLIDING_PATTERN))
    if tiny:  # the fixture tokenizer's vocabulary, and image tokens past it (unused)
        with open(os.path.join(TOKENIZER, "tokenizer.json")) as f:
            tok = json.load(f)
        vocab = max(list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]) + 1
        gemma_text["vocab_size"] = vocab
        top = dict(mm_tokens_per_image=4, image_token_index=vocab + 10, boi_token_index=vocab + 8,
                   eoi_token_index=vocab + 9)
    else:
        top = GEMMA_TOP
    gemma_cfg = Gemma3Config(text_config=gemma_text, vision_config=TINY_VISION if tiny else VISION, **top)
    connectors = dict(TINY_CONNECTORS if tiny else CONNECTORS, text_proj_in_factor=layers + 1)
    parts = [
        ("transformer", lambda: LTX2VideoTransformer3DModel(**(TINY_TRANSFORMER if tiny else TRANSFORMER))),
        ("text_encoder", lambda: Gemma3ForConditionalGeneration(gemma_cfg)),
        ("connectors", lambda: LTX2TextConnectors(**connectors)),
        ("vae", lambda: AutoencoderKLLTX2Video(**(TINY_VIDEO_VAE if tiny else VIDEO_VAE))),
        ("audio_vae", lambda: AutoencoderKLLTX2Audio(**(TINY_AUDIO_VAE if tiny else AUDIO_VAE))),
        ("vocoder", lambda: LTX2Vocoder(**(TINY_VOCODER if tiny else VOCODER))),
    ]
    if a.two_stage:
        parts.append(("latent_upsampler", lambda: LTX2LatentUpsamplerModel(**(TINY_UPSAMPLER if tiny else UPSAMPLER))))
    torch.manual_seed(a.seed)
    total = 0
    for name, build in parts:
        t = time.perf_counter()
        torch.set_default_dtype(dtype)  # parameters are made in the folder's dtype, on the device
        try:
            # The upsampler's blur kernel is an integer matmul at construction, which CUDA has
            # not: it is built on the CPU and saved from there (1 GB).
            with torch.device("cpu") if name == "latent_upsampler" else dev:
                m = build().eval()
        finally:
            torch.set_default_dtype(torch.float32)
        cast_saved(m, dtype)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_build = time.perf_counter() - t
        n = sum(p.numel() for p in m.parameters())
        m.save_pretrained(os.path.join(tmp, name), max_shard_size=shard)
        size = folder_bytes(os.path.join(tmp, name))
        total += size
        print(f"make_ltx2: {name}: {n / 1e6:.1f} M params, {size / 1e9:.2f} GB written, built {t_build:.1f} s, "
              f"saved {time.perf_counter() - t - t_build:.1f} s", flush=True)
        del m
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    FlowMatchEulerDiscreteScheduler(**SCHEDULER).save_pretrained(os.path.join(tmp, "scheduler"))
    shutil.copytree(TOKENIZER, os.path.join(tmp, "tokenizer"))
    with open(os.path.join(tmp, "model_index.json"), "w") as f:
        # diffusers 0.42.1's index for an LTX2Pipeline, as the tiny fixture folder pins it.
        index = json.load(open(os.path.join(os.path.dirname(TOKENIZER), "model_index.json")))
        json.dump(dict(index, _diffusers_version=diffusers.__version__), f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(tmp, "README.md"), "w") as f:
        f.write(f"Random weights, for benchmarks only: host/scripts/gpu/make_ltx2.py ({'tiny' if tiny else 'LTX-2 2.0 sizes'}, "
                f"{layers} of Gemma's {TINY_GEMMA_LAYERS if tiny else GEMMA_LAYERS} layers, {a.dtype}).\n")
    shutil.rmtree(a.out, ignore_errors=True)
    os.rename(tmp, a.out)
    print(f"make_ltx2: {a.out} built in {time.perf_counter() - t0:.1f} s, {total / 1e9:.2f} GB "
          f"({layers} text layers{', latent upsampler' if a.two_stage else ''})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
