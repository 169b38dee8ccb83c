"""The tiny video decoder (TAEHV-class architecture, our own weights): the reference definition
that `train_tiny_vae.py` trains and `tests/fixtures/make_tiny_vae_fixtures.py` draws parity
fixtures from. The Rust port is models/wan/src/tiny_vae/.

It maps the full VAE's (denormalized) latents `[B, z, T, h, w]` to video `[B, 3, 4T-3, H, W]` in
[-1, 1] like AutoencoderKLWan.decode, with 2-D convolutions per frame and a causal memory of one
frame per block: each "memory block" sees its input and its input one frame earlier (zeros before
the first), so decoding chunk by chunk, carrying each block's last input frame, equals decoding the
whole sequence. Stages: 3 memory blocks, nearest 2x upsampling in space, a 1x1 "grow" convolution
that multiplies frames by its stride (2 in time where `time_upscale`), then a 3x3 projection to the
next width.
"""

import json

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv3(n_in, n_out, bias=True):
    return nn.Conv2d(n_in, n_out, 3, padding=1, bias=bias)


class MemoryBlock(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.conv = nn.Sequential(conv3(2 * n, n), nn.ReLU(), conv3(n, n), nn.ReLU(), conv3(n, n))

    def forward(self, x, past):
        """x, past: [N*T, C, H, W] (past = the input one frame earlier)."""
        return F.relu(self.conv(torch.cat([x, past], 1)) + x)


class Stage(nn.Module):
    def __init__(self, n_in, n_out, time_stride, space_up):
        super().__init__()
        self.blocks = nn.ModuleList([MemoryBlock(n_in) for _ in range(3)])
        self.time_stride = time_stride
        self.space_up = space_up
        self.grow = nn.Conv2d(n_in, n_in * time_stride, 1, bias=False)
        self.proj = conv3(n_in, n_out, bias=False)


class TinyVideoDecoder(nn.Module):
    def __init__(self, latent_channels=16, channels=(256, 128, 64, 64), time_upscale=(False, True, True),
                 space_upscale=(True, True, True), patch_size=1):
        super().__init__()
        self.config = dict(latent_channels=latent_channels, channels=list(channels),
                           time_upscale=list(time_upscale), space_upscale=list(space_upscale), patch_size=patch_size)
        c = list(channels)
        self.conv_in = conv3(latent_channels, c[0])
        self.stages = nn.ModuleList(
            [Stage(c[i], c[i + 1], 2 if time_upscale[i] else 1, space_upscale[i]) for i in range(3)])
        self.conv_out = conv3(c[3], 3 * patch_size**2)
        self.patch_size = patch_size
        self.time_factor = 2 ** sum(bool(t) for t in time_upscale)

    def forward(self, z, clamp=True):
        """z [B, z, T, h, w] -> video [B, 3, time_factor*T - (time_factor-1), H, W] in [-1, 1]
        (unclamped with `clamp=False`, for training)."""
        b, _, t, _, _ = z.shape
        x = z.permute(0, 2, 1, 3, 4).reshape(b * t, z.shape[1], z.shape[3], z.shape[4])
        x = F.relu(self.conv_in(torch.tanh(x / 3) * 3))
        for s in self.stages:
            for blk in s.blocks:
                nt, c, h, w = x.shape
                frames = x.view(b, nt // b, c, h, w)
                past = F.pad(frames, (0, 0, 0, 0, 0, 0, 1, 0))[:, :-1].reshape(nt, c, h, w)
                x = blk(x, past)
            if s.space_up:
                x = F.interpolate(x, scale_factor=2, mode="nearest")
            nt, c, h, w = x.shape
            x = s.grow(x).reshape(nt * s.time_stride, c, h, w)
            x = s.proj(x)
        x = self.conv_out(F.relu(x))
        if self.patch_size > 1:
            x = F.pixel_shuffle(x, self.patch_size)
        nt, _, h, w = x.shape
        video = x.view(b, nt // b, 3, h, w).permute(0, 2, 1, 3, 4)
        video = video[:, :, self.time_factor - 1:]
        return video.clamp(-1, 1) if clamp else video

    def save(self, folder):
        import os

        from safetensors.torch import save_file
        os.makedirs(folder, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.state_dict().items()},
                  os.path.join(folder, "diffusion_pytorch_model.safetensors"))
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"_class_name": "TinyVideoDecoder", **self.config}, f, indent=1)
