"""The pinned audio front end and losses of train_sound.py: the log-mel the audio VAE is trained
on (16 kHz, Hann 1024, hop 160, 64 Slaney bands 0-8 kHz), the pipeline's audio lengths and the
`tone` share `fastvideo eval`'s listener measures."""

import math

import numpy as np
import torch

RATE, HOP, N_FFT, MELS = 16000, 160, 1024, 64  # the audio VAE's mel front end (pinned)
LATENT_PER_SECOND = RATE / HOP / 4  # audio latents a second (the pipeline's count): 25


def slaney_mel_filters(rate, n_fft, n_mels, fmin=0.0, fmax=None):
    """[n_mels, n_fft // 2 + 1] triangular filters on the Slaney mel scale, Slaney-normalised."""
    fmax = fmax or rate / 2

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        lin = f / (200.0 / 3)
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-9) / 1000.0) / (np.log(6.4) / 27.0), lin)

    def mel_to_hz(m):
        m = np.asarray(m, dtype=np.float64)
        return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)), m * 200.0 / 3)

    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    lower = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    upper = (edges[2:, None] - freqs[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    fb = np.maximum(0.0, np.minimum(lower, upper)) * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return torch.from_numpy(fb.astype(np.float32))


class MelFront:
    """Waveform [B, 2, T * HOP] -> log-mel [B, 2, T, MELS] (the audio VAE's input and output)."""

    def __init__(self, device):
        self.fb = slaney_mel_filters(RATE, N_FFT, MELS).to(device)
        self.window = torch.hann_window(N_FFT, device=device)

    def __call__(self, wave):
        b, c, s = wave.shape
        spec = torch.stft(wave.reshape(b * c, s).float(), N_FFT, HOP, N_FFT, self.window, center=True,
                          pad_mode="reflect", return_complex=True).abs()[..., : s // HOP]
        mel = torch.log(torch.clamp(self.fb @ spec, min=1e-5))
        return mel.reshape(b, c, MELS, -1).transpose(2, 3)


def audio_lengths(frames, fps):
    """(latent frames, mel frames, samples) of a clip, as the pipeline sizes its sound."""
    latents = round(frames / fps * LATENT_PER_SECOND)
    mel = 4 * latents - 3
    return latents, mel, mel * HOP


def tone_share(pred, target):
    """Mean share of `pred`'s energy at `target`'s pitch over the whole clip (both [B, 2, S]): the
    pitch is the target's strongest frequency (zero-padded FFT), the share measured as `fastvideo
    eval`'s listener does (a single DFT bin at that exact frequency, mono = L + R)."""
    p, t = pred.float().sum(1), target.float().sum(1)
    s = t.shape[-1]
    spec = torch.fft.rfft(t, n=16 * s).abs()
    f = spec[:, 1:].argmax(-1).float().add(1) * RATE / (16 * s)  # Hz
    n = torch.arange(s, device=p.device).float()
    phase = 2 * math.pi * f[:, None] * n[None, :] / RATE
    energy = (p * torch.cos(phase)).sum(-1) ** 2 + (p * torch.sin(phase)).sum(-1) ** 2
    return (2 * energy / s / p.square().sum(-1).clamp(min=1e-12)).clamp(max=1).mean().item()
