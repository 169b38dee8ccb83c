"""Trains the default model with sound: a small LTX-2 (2.0 layout) on procedural clips and the
soundtrack their picture determines (host/procedural/src/sound.rs: pitch = shape, loudness =
size, stereo place = horizontal position).

Every component is built from the reference classes (diffusers 0.42.1's LTX2VideoTransformer3DModel,
LTX2TextConnectors, AutoencoderKLLTX2Video, AutoencoderKLLTX2Audio, LTX2Vocoder; transformers'
Gemma3ForConditionalGeneration with a word-level tokenizer.json), so the folder is exactly the
`LTX2Pipeline` layout diffusers loads and models/ltx2 reads.

Stages (each resumable from the folder it writes; run in chunks of a few minutes of GPU time):

    fastvideo dataset --out data --clips 24000 --sound --fps 24     # clips.u8 + sounds.f32
    python3 train_sound.py --data data --out ckpt --stage vae   --minutes 4
    python3 train_sound.py --data data --out ckpt --stage audio --minutes 2
    python3 train_sound.py --data data --out ckpt --stage vocoder --minutes 10   # decoder side only
    python3 train_sound.py --data data --out ckpt --stage dit   --minutes 8   # repeat to resume
    python3 train_sound.py --data data --out ckpt --stage dit   --minutes 4 --anneal   # last run

`--stage vae` trains the video VAE (L1 + MSE with object pixels weighted 10x, tiny KL,
`--edge-weight` for an L1 on spatial gradients), as train_default.py does.

`--stage audio` trains the audio VAE and the vocoder together. The mel front end is this file's
`MelFront` and is pinned: 16 kHz, Hann window 1024, hop 160 (100 frames a second, the audio VAE's
`sample_rate`/`mel_hop_length`), 64 Slaney mel bands 0-8 kHz, magnitude, `log(max(mel, 1e-5))`,
one spectrum per channel (stereo in, stereo out). diffusers' LTX2Pipeline never computes a mel (it
decodes latents to mel and the vocoder makes the waveform), so only this training has to agree
with itself. A clip of F frames at `fps` has L = round(F / fps * 25) audio latents (the pipeline's
count), the VAE decodes them to 4L - 3 mel frames and the vocoder to (4L - 3) * 160 samples: the
stage trains on exactly the first (4L - 3) * 160 samples of each soundtrack. Losses: audio VAE
L1 on the log-mel + tiny KL; vocoder (fed the true mel or, half the time, the VAE's
reconstruction, so it forgives the VAE's blur) squared error on the waveform alone (the tones are
harmonics of the mel frame rate, phase-locked at every frame: the waveform is a function of the
mel; STFT-magnitude losses, tried first, held the vocoder near silence). `--stage vocoder` trains
the decoding side alone (the audio VAE's decoder and the vocoder; the encoder frozen, so it is
safe after the dit stage). The log prints `tone`: the share of the vocoder output's energy at the target's exact pitch, as
`fastvideo eval`'s listener measures it (1 for a pure tone).

`--stage dit` freezes the VAEs, encodes every clip and soundtrack once, sets both VAEs'
`latents_mean`/`latents_std` buffers from the data (the pipeline normalises the video latents per
channel and the packed audio latents [B, L, C*M] per packed feature with them), and trains the
transformer, the connectors and the text encoder with the flow-matching objective on both streams
(velocity `noise - x0`, one logit-normal sigma shared by the streams as the pipeline steps them,
timestep `1000 * sigma`), 10% prompt dropout (the empty prompt) so classifier-free guidance works,
and 10% of steps with the streams isolated (`isolate_modalities`) so the pipeline's modality
guidance pass is a prediction the model was trained to make.

Each stage appends to ckpt/train_log.jsonl and updates ckpt/train_state.json; resuming reloads
the weights and step counts (optimizer moments restart, short warm-up). After every stage the
folder gets model_index.json, tokenizer/, scheduler/ and fastvideo.json (run defaults from the
data: size, frames, fps; 20 steps; text length 16). Weights are saved in float32.
"""

import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.models.autoencoders.autoencoder_kl_ltx2 import AutoencoderKLLTX2Video
from diffusers.models.autoencoders.autoencoder_kl_ltx2_audio import AutoencoderKLLTX2Audio
from diffusers.models.transformers.transformer_ltx2 import LTX2VideoTransformer3DModel
from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import Gemma3Config, Gemma3ForConditionalGeneration, PreTrainedTokenizerFast

from sound_audio import HOP, MELS, RATE, MelFront, audio_lengths, tone_share
# The default model's log lines, pixel scaling, VAE loss and optimizer step, as they are.
from train_default import Log, to_unit, update, vae_loss

WORDS = (
    "a on background moving left right up down growing shrinking "
    "red green blue yellow purple orange white black gray "
    "circle square triangle star cross"
).split()
TEXT_LEN = 16  # the prompt's token count (fastvideo.json max_sequence_length)
Z_DIM = 16  # video latent channels
AUDIO_Z = 4  # audio latent channels: the packed width is AUDIO_Z * MELS / 4 = 64
GEMMA_LAYERS, GEMMA_DIM = 2, 64

# The published LTX-2 scheduler config (as tests/fixtures/make_ltx2_pipeline_fixtures.py writes it).
SCHEDULER = dict(base_image_seq_len=1024, base_shift=0.95, invert_sigmas=False, max_image_seq_len=4096,
                 max_shift=2.05, num_train_timesteps=1000, shift=1.0, shift_terminal=0.1, stochastic_sampling=False,
                 time_shift_type="exponential", use_beta_sigmas=False, use_dynamic_shifting=True,
                 use_exponential_sigmas=False, use_karras_sigmas=False)


# ---------------------------------------------------------------- components


def tokenizer():
    """Word-level tokenizer.json with Gemma's specials (pad 0, eos 1, bos 2, unk 3), `<bos>` first,
    left padding: what the pipeline and models/ltx2 do with Gemma's."""
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", padding_side="left")


def new_text_encoder(vocab_size):
    # The vision tower must exist (diffusers loads the class whole) but is never run: keep it tiny.
    text = dict(vocab_size=vocab_size, hidden_size=GEMMA_DIM, intermediate_size=4 * GEMMA_DIM,
                num_hidden_layers=GEMMA_LAYERS, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                query_pre_attn_scalar=32, sliding_window=TEXT_LEN,
                layer_types=["sliding_attention", "full_attention"],
                rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                                 "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                max_position_embeddings=64)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    return Gemma3ForConditionalGeneration(
        Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=vocab_size + 2,
                     boi_token_index=vocab_size, eoi_token_index=vocab_size + 1))


def new_connectors():
    return LTX2TextConnectors(caption_channels=GEMMA_DIM, text_proj_in_factor=GEMMA_LAYERS + 1,
                              video_connector_num_attention_heads=2, video_connector_attention_head_dim=32,
                              video_connector_num_layers=2, video_connector_num_learnable_registers=TEXT_LEN,
                              audio_connector_num_attention_heads=2, audio_connector_attention_head_dim=32,
                              audio_connector_num_layers=2, audio_connector_num_learnable_registers=TEXT_LEN,
                              connector_rope_base_seq_len=TEXT_LEN)


def new_transformer(args):
    heads, audio_heads = args.video_dim // 32, args.audio_dim // 32
    return LTX2VideoTransformer3DModel(
        in_channels=Z_DIM, out_channels=Z_DIM, patch_size=1, patch_size_t=1, num_attention_heads=heads,
        attention_head_dim=32, cross_attention_dim=heads * 32, vae_scale_factors=(4, 8, 8), pos_embed_max_pos=20,
        base_height=256, base_width=256, audio_in_channels=AUDIO_Z * MELS // 4, audio_out_channels=AUDIO_Z * MELS // 4,
        audio_num_attention_heads=audio_heads, audio_attention_head_dim=32, audio_cross_attention_dim=audio_heads * 32,
        audio_pos_embed_max_pos=20, audio_sampling_rate=RATE, audio_hop_length=HOP, num_layers=args.layers,
        caption_channels=GEMMA_DIM)


def new_vae():
    # Spatial x8 (patch 2, two spatio-temporal downsamples), temporal x4: 17 frames of 64x64 -> [16, 5, 8, 8].
    return AutoencoderKLLTX2Video(
        in_channels=3, out_channels=3, latent_channels=Z_DIM, block_out_channels=(32, 64),
        down_block_types=("LTX2VideoDownBlock3D", "LTX2VideoDownBlock3D"), layers_per_block=(1, 1, 1),
        spatio_temporal_scaling=(True, True), downsample_type=("spatiotemporal", "spatiotemporal"),
        decoder_block_out_channels=(32, 64), decoder_layers_per_block=(1, 1, 1),
        decoder_spatio_temporal_scaling=(True, True), upsample_type=("spatiotemporal", "spatiotemporal"),
        upsample_residual=(False, True), upsample_factor=(1, 2), patch_size=2, patch_size_t=1)


def new_audio_vae():
    # ch_mult of three levels: two downsamples, the x4 in time and mel the pipeline assumes.
    # base_channels sizes the latent statistics, which normalise the packed width AUDIO_Z * MELS / 4.
    return AutoencoderKLLTX2Audio(base_channels=AUDIO_Z * MELS // 4, output_channels=2, ch_mult=(1, 1, 2),
                                  num_res_blocks=1, latent_channels=AUDIO_Z, resolution=MELS, mel_bins=MELS,
                                  sample_rate=RATE, mel_hop_length=HOP)


def new_vocoder():
    # 160 samples per mel frame at 16 kHz (the data's rate): sound and picture last as long.
    return LTX2Vocoder(in_channels=2 * MELS, hidden_channels=128, out_channels=2, upsample_kernel_sizes=[11, 8, 16],
                       upsample_factors=[5, 4, 8], resnet_kernel_sizes=[3, 7], resnet_dilations=[[1, 3], [1, 3]],
                       output_sampling_rate=RATE)


# ---------------------------------------------------------------- data, log, state


def load_clips(data, device):
    meta = json.load(open(os.path.join(data, "clips.json")))
    n, f, h, w, c = meta["shape"]
    raw = np.fromfile(os.path.join(data, "clips.u8"), dtype=np.uint8).reshape(n, f, h, w, c)
    clips = torch.from_numpy(raw).to(device).permute(0, 4, 1, 2, 3).contiguous()  # N, 3, F, H, W uint8
    return clips, meta


def load_sounds(data, device):
    """Soundtracks [N, 2, samples] cut to the length the pipeline decodes, and the metadata."""
    meta = json.load(open(os.path.join(data, "clips.json")))
    snd = meta.get("sound")
    assert snd, f"{data}: no soundtracks (make the data with `fastvideo dataset --sound`)"
    assert snd["rate"] == RATE, f"the audio VAE's front end is {RATE} Hz; the data is {snd['rate']} Hz"
    n, s, c = snd["shape"]
    _, _, samples = audio_lengths(meta["shape"][1], snd["fps"])
    assert samples <= s, f"{samples} samples needed, the data has {s}"
    raw = np.fromfile(os.path.join(data, "sounds.f32"), dtype=np.float32).reshape(n, s, c)[:, :samples]
    waves = torch.from_numpy(np.ascontiguousarray(raw)).to(device).transpose(1, 2).contiguous()
    return waves, meta


def state(out):
    p = os.path.join(out, "train_state.json")
    st = json.load(open(p)) if os.path.exists(p) else {}
    for k in ("vae_steps", "audio_steps", "vocoder_steps", "dit_steps"):
        st.setdefault(k, 0)
    st.setdefault("gpu_seconds", 0.0)
    return st


def save_state(out, stage, steps, seconds):
    """Re-reads the state and updates only this stage's count (the vae and audio stages may run at
    once on one GPU: see train_sound_on_gpu.sh)."""
    st = state(out)
    st[f"{stage}_steps"] = steps
    st["gpu_seconds"] += seconds
    json.dump(st, open(os.path.join(out, "train_state.json"), "w"), indent=2)


def set_lr(opt, lr):
    for group in opt.param_groups:
        group["lr"] = lr


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda")


# ---------------------------------------------------------------- stage vae


def train_vae(args, device):
    clips, meta = load_clips(args.data, device)
    vae_dir = os.path.join(args.out, "vae")
    vae = AutoencoderKLLTX2Video.from_pretrained(vae_dir) if os.path.exists(vae_dir) else new_vae()
    vae.to(device).train()
    params = [p for p in vae.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    st, log = state(args.out), Log(args.out, "vae")
    start, step = time.time(), st["vae_steps"]
    g = torch.Generator(device=device).manual_seed(step)
    while time.time() - start < args.minutes * 60:
        idx = torch.randint(0, clips.shape[0], (args.batch,), device=device, generator=g)
        x = to_unit(clips[idx])
        set_lr(opt, args.lr * min(1.0, (step - st["vae_steps"] + 1) / 100))
        with autocast(device):
            post = vae.encode(x).latent_dist
            rec = vae.decode(post.sample(generator=g)).sample.float()
        kl = post.kl().float().mean() / x[0].numel()
        loss = vae_loss(rec, x, kl, args.edge_weight)
        update(opt, loss, params)
        step += 1
        if step % args.log_every == 0:
            log.write(step=step, loss=loss.item(), kl=kl.item(), seconds=time.time() - start)
            print(f"vae step {step} loss {loss.item():.4f}", flush=True)
    print(f"vae: {step - st['vae_steps']} steps in {time.time() - start:.0f}s, now {step}", flush=True)
    seconds = time.time() - start
    vae.eval().save_pretrained(vae_dir, safe_serialization=True)
    save_state(args.out, "vae", step, seconds)
    write_pipeline_files(args.out, meta)


# ---------------------------------------------------------------- stage audio


def train_audio(args, device):
    """`--stage audio`: the audio VAE and the vocoder together. `--stage vocoder`: the decoding side
    alone (the audio VAE's decoder and the vocoder), the encoder frozen, so the latents the
    transformer learnt stay as they are."""
    both = args.stage == "audio"
    waves, meta = load_sounds(args.data, device)
    mel_of = MelFront(device)
    avae_dir, voc_dir = os.path.join(args.out, "audio_vae"), os.path.join(args.out, "vocoder")
    avae = AutoencoderKLLTX2Audio.from_pretrained(avae_dir) if os.path.exists(avae_dir) else new_audio_vae()
    assert both or os.path.exists(avae_dir), f"--stage vocoder: no trained audio VAE in {avae_dir}"
    voc = LTX2Vocoder.from_pretrained(voc_dir) if os.path.exists(voc_dir) else new_vocoder()
    avae.to(device).train()
    avae.encoder.requires_grad_(both)
    voc.to(device).train()
    params = list((avae if both else avae.decoder).parameters()) + list(voc.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.8, 0.99))
    key = "audio" if both else "vocoder"
    st, log = state(args.out), Log(args.out, key)
    start, step = time.time(), st[f"{key}_steps"]
    g = torch.Generator(device=device).manual_seed(2000 + step + (0 if both else 7))
    budget = args.minutes * 60
    while time.time() - start < budget:
        idx = torch.randint(0, waves.shape[0], (args.batch,), device=device, generator=g)
        wave = waves[idx]
        mel = mel_of(wave)  # [B, 2, T, MELS]
        warm = min(1.0, (step - st[f"{key}_steps"] + 1) / 100)
        decay = max(0.05, 1 - (time.time() - start) / budget) if args.anneal else 1.0
        set_lr(opt, args.lr * warm * decay)
        with autocast(device):
            with torch.set_grad_enabled(both):
                post = avae.encode(mel).latent_dist
            rec = avae.decode(post.sample(generator=g)).sample.float()
        mel_l1 = (rec - mel).abs().mean()
        vae_loss = mel_l1 + (1e-4 * post.kl().float().mean() / mel[0].numel() if both else 0.0)
        # The vocoder hears the true mel or (half the batch) the VAE's reconstruction of it.
        use_rec = (torch.rand(args.batch, device=device, generator=g) < 0.5).view(-1, 1, 1, 1)
        voc_in = torch.where(use_rec, rec.detach(), mel)
        with autocast(device):
            out = voc(voc_in).float()
        # Squared error on the waveform alone: the soundtracks' tones are harmonics of the mel
        # frame rate with their phase fixed at every frame, so the waveform is a function of the
        # mel. STFT-magnitude losses pull a vocoder toward silence on pure tones (README).
        voc_loss = (out - wave).square().mean()
        loss = vae_loss + voc_loss
        update(opt, loss, params)
        step += 1
        if step % args.log_every == 0:
            with torch.no_grad():
                tone = tone_share(out[~use_rec.view(-1)], wave[~use_rec.view(-1)]) if (~use_rec).any() else 0.0
            log.write(step=step, loss=loss.item(), mel_l1=mel_l1.item(), vocoder=voc_loss.item(), tone=tone,
                      seconds=time.time() - start)
            print(f"{key} step {step} mel L1 {mel_l1.item():.4f} vocoder {voc_loss.item():.5f} tone {tone:.3f}",
                  flush=True)
    print(f"{key}: {step - st[f'{key}_steps']} steps in {time.time() - start:.0f}s, now {step}", flush=True)
    seconds = time.time() - start
    avae.eval().save_pretrained(avae_dir, safe_serialization=True)
    voc.eval().save_pretrained(voc_dir, safe_serialization=True)
    # How the full decode path (mel -> audio VAE -> vocoder) keeps the pitch, on held batches.
    with torch.no_grad(), autocast(device):
        wave = waves[: min(64, waves.shape[0])]
        through = voc(avae.decode(avae.encode(mel_of(wave)).latent_dist.mode()).sample).float()
        direct = voc(mel_of(wave)).float()
    tones = {"tone_vocoder": tone_share(direct, wave), "tone_vae_vocoder": tone_share(through, wave),
             "tone_data": tone_share(wave, wave)}
    print("audio check:", json.dumps({k: round(v, 3) for k, v in tones.items()}), flush=True)
    log.write(step=step, **tones)
    save_state(args.out, key, step, seconds)
    write_pipeline_files(args.out, meta)


# ---------------------------------------------------------------- stage dit


def pack_video(z):  # [B, C, F, H, W] -> [B, F*H*W, C] (the pipeline's _pack_latents with patch 1)
    return z.permute(0, 2, 3, 4, 1).flatten(1, 3)


def pack_audio(z):  # [B, C, L, M] -> [B, L, C*M] (the pipeline's _pack_audio_latents)
    return z.transpose(1, 2).flatten(2, 3)


@torch.no_grad()
def encode_video(vae, clips, batch=64):
    out = []
    for i in range(0, clips.shape[0], batch):
        out.append(vae.encode(to_unit(clips[i : i + batch])).latent_dist.mode().float())
    return torch.cat(out)


@torch.no_grad()
def encode_audio(avae, waves, mel_of, batch=256):
    out = []
    for i in range(0, waves.shape[0], batch):
        out.append(avae.encode(mel_of(waves[i : i + batch])).latent_dist.mode().float())
    return torch.cat(out)


def prompt_states(te, tok, prompts, device):
    """Every Gemma layer's hidden state, stacked and flattened, and the mask: the pipeline's
    `_get_gemma_prompt_embeds` (prompts stripped, left-padded to TEXT_LEN, `<bos>` first)."""
    enc = tok([p.strip() for p in prompts], padding="max_length", max_length=TEXT_LEN, truncation=True,
              add_special_tokens=True, return_tensors="pt")
    ids, mask = enc.input_ids.to(device), enc.attention_mask.to(device)
    hs = te(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    return torch.stack(hs, dim=-1).flatten(2, 3), mask


def train_dit(args, device):
    clips, meta = load_clips(args.data, device)
    waves, _ = load_sounds(args.data, device)
    prompts = meta["prompts"]
    fps = meta["sound"]["fps"]
    vae_dir, avae_dir = os.path.join(args.out, "vae"), os.path.join(args.out, "audio_vae")
    vae = AutoencoderKLLTX2Video.from_pretrained(vae_dir).to(device).eval()
    avae = AutoencoderKLLTX2Audio.from_pretrained(avae_dir).to(device).eval()
    t0 = time.time()
    z = encode_video(vae, clips)
    za = pack_audio(encode_audio(avae, waves, MelFront(device)))
    del clips, waves
    # The latent statistics the pipeline normalises with: set once, from the data, then kept (a
    # resumed run must see the latent space it was trained on).
    if bool((vae.latents_std == 1).all()) and bool((vae.latents_mean == 0).all()):
        vae.latents_mean.copy_(z.mean(dim=(0, 2, 3, 4)).cpu())
        vae.latents_std.copy_(z.std(dim=(0, 2, 3, 4)).cpu())
        vae.save_pretrained(vae_dir, safe_serialization=True)
    if bool((avae.latents_std == 1).all()) and bool((avae.latents_mean == 0).all()):
        avae.latents_mean.copy_(za.mean(dim=(0, 1)).cpu())
        avae.latents_std.copy_(za.std(dim=(0, 1)).cpu())
        avae.save_pretrained(avae_dir, safe_serialization=True)
    n_frames, lh, lw = z.shape[2:]
    m, s = vae.latents_mean.to(device).view(1, -1, 1, 1, 1), vae.latents_std.to(device).view(1, -1, 1, 1, 1)
    z = pack_video((z - m) * vae.config.scaling_factor / s)
    za = (za - avae.latents_mean.to(device)) / avae.latents_std.to(device)
    audio_frames = za.shape[1]
    assert audio_frames == audio_lengths(meta["shape"][1], fps)[0], (audio_frames, audio_lengths(meta["shape"][1], fps))
    del vae, avae
    print(f"encoded {z.shape[0]} clips: video tokens {tuple(z.shape[1:])} ({n_frames}x{lh}x{lw}), "
          f"audio tokens {tuple(za.shape[1:])} in {time.time() - t0:.1f}s", flush=True)

    tok = tokenizer()
    te_dir, co_dir, tr_dir = (os.path.join(args.out, c) for c in ("text_encoder", "connectors", "transformer"))
    te = Gemma3ForConditionalGeneration.from_pretrained(te_dir) if os.path.exists(te_dir) else new_text_encoder(len(tok))
    co = LTX2TextConnectors.from_pretrained(co_dir) if os.path.exists(co_dir) else new_connectors()
    tr = LTX2VideoTransformer3DModel.from_pretrained(tr_dir) if os.path.exists(tr_dir) else new_transformer(args)
    for mod in (te, co, tr):
        mod.to(device).train()
    params = list(tr.parameters()) + list(co.parameters()) + list(te.model.language_model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    st, log = state(args.out), Log(args.out, "dit")
    start, step = time.time(), st["dit_steps"]
    g = torch.Generator(device=device).manual_seed(1000 + step)
    budget = args.minutes * 60
    while time.time() - start < budget:
        idx = torch.randint(0, z.shape[0], (args.batch,), device=device, generator=g)
        x0, a0 = z[idx], za[idx]
        drop = torch.rand(args.batch, generator=g, device=device) < 0.1
        batch_prompts = ["" if d else prompts[i] for i, d in zip(idx.tolist(), drop.tolist())]
        warm = min(1.0, (step - st["dit_steps"] + 1) / 200)
        decay = max(0.05, 1 - (time.time() - start) / budget) if args.anneal else 1.0
        set_lr(opt, args.lr * warm * decay)
        sigma = torch.sigmoid(torch.randn(args.batch, device=device, generator=g))
        noise = torch.randn(x0.shape, device=device, generator=g)
        anoise = torch.randn(a0.shape, device=device, generator=g)
        xt = (1 - sigma.view(-1, 1, 1)) * x0 + sigma.view(-1, 1, 1) * noise
        at = (1 - sigma.view(-1, 1, 1)) * a0 + sigma.view(-1, 1, 1) * anoise
        isolate = bool(torch.rand(1, generator=g, device=device).item() < args.isolate)
        with autocast(device):
            states, mask = prompt_states(te, tok, batch_prompts, device)
            video_text, audio_text, text_mask = co(states, mask, padding_side="left")
            pv, pa = tr(hidden_states=xt, audio_hidden_states=at, encoder_hidden_states=video_text,
                        audio_encoder_hidden_states=audio_text, timestep=sigma * 1000, sigma=sigma * 1000,
                        encoder_attention_mask=text_mask, audio_encoder_attention_mask=text_mask,
                        num_frames=n_frames, height=lh, width=lw, fps=fps, audio_num_frames=audio_frames,
                        isolate_modalities=isolate, return_dict=False)
        loss_v = F.mse_loss(pv.float(), noise - x0)
        loss_a = F.mse_loss(pa.float(), anoise - a0)
        loss = loss_v + args.audio_weight * loss_a
        update(opt, loss, params)
        step += 1
        if step % args.log_every == 0:
            log.write(step=step, loss=loss.item(), video=loss_v.item(), audio=loss_a.item(),
                      lr=opt.param_groups[0]["lr"], seconds=time.time() - start)
            print(f"dit step {step} video {loss_v.item():.4f} audio {loss_a.item():.4f}", flush=True)
    print(f"dit: {step - st['dit_steps']} steps in {time.time() - start:.0f}s, now {step}", flush=True)
    seconds = time.time() - start
    te.eval().save_pretrained(te_dir, safe_serialization=True)
    co.eval().save_pretrained(co_dir, safe_serialization=True)
    tr.eval().save_pretrained(tr_dir, safe_serialization=True)
    save_state(args.out, "dit", step, seconds)
    write_pipeline_files(args.out, meta)


# ---------------------------------------------------------------- the rest of the folder


def write_pipeline_files(out, meta):
    """model_index.json, tokenizer/, scheduler/ and fastvideo.json next to the trained weights."""
    tokenizer().save_pretrained(os.path.join(out, "tokenizer"))
    FlowMatchEulerDiscreteScheduler(**SCHEDULER).save_pretrained(os.path.join(out, "scheduler"))
    # diffusers 0.42.1's index for an LTX2Pipeline, as the tiny fixture folder pins it.
    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "tiny-ltx2")
    index = json.load(open(os.path.join(fixture, "model_index.json")))
    json.dump(index, open(os.path.join(out, "model_index.json"), "w"), indent=2)
    run = os.path.join(out, "fastvideo.json")
    if not os.path.exists(run):
        n, frames, h, w, _ = meta["shape"]
        json.dump(
            {
                "description": "trained by this project on procedural clips with a soundtrack the picture "
                "determines (models/training/train_sound.py): shapes, colours, motions and backgrounds; "
                "each shape has a pitch, size is loudness, position is stereo place; see docs/quality.md",
                "steps": 20,
                "guidance_scale": 3.0,
                "height": h,
                "width": w,
                "num_frames": frames,
                "fps": round(meta.get("sound", {}).get("fps", 24)),
                "max_sequence_length": TEXT_LEN,
            },
            open(run, "w"),
            indent=2,
        )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True, help="a `fastvideo dataset --sound` folder")
    p.add_argument("--out", required=True)
    p.add_argument("--stage", choices=["vae", "audio", "vocoder", "dit"], required=True)
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--batch", type=int, default=None, help="default: vae 32, audio and vocoder 64, dit 256")
    p.add_argument("--lr", type=float, default=None, help="default: vae 1e-3, audio 5e-4, vocoder 1e-3, dit 5e-4")
    p.add_argument("--anneal", action="store_true", help="decay the learning rate over this run (audio, dit)")
    p.add_argument("--edge-weight", type=float, default=0.0, help="vae: weight of the spatial-gradient L1 term")
    p.add_argument("--audio-weight", type=float, default=1.0, help="dit: weight of the audio stream's loss")
    p.add_argument("--isolate", type=float, default=0.1, help="dit: share of steps with the streams isolated")
    p.add_argument("--layers", type=int, default=8, help="dit (new model only): transformer blocks")
    p.add_argument("--video-dim", type=int, default=128, help="dit (new model only): video width (32 per head)")
    p.add_argument("--audio-dim", type=int, default=64, help="dit (new model only): audio width (32 per head)")
    p.add_argument("--log-every", type=int, default=50)
    args = p.parse_args()
    if args.batch is None:
        args.batch = {"vae": 32, "audio": 64, "vocoder": 64, "dit": 256}[args.stage]
    if args.lr is None:
        args.lr = {"vae": 1e-3, "audio": 5e-4, "vocoder": 1e-3, "dit": 5e-4}[args.stage]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(args.out, exist_ok=True)
    {"vae": train_vae, "audio": train_audio, "vocoder": train_audio, "dit": train_dit}[args.stage](args, device)


if __name__ == "__main__":
    main()
