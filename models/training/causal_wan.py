"""diffusers' WanTransformer3DModel run as the causal world model the Rust runtime serves
(models/wan/src/causal.rs, world.rs): a block-causal self-attention mask, per-frame timesteps
(diffusers' own per-token timestep path), an action embedding added to each frame's timestep
embedding, and rotary positions that may repeat (the teacher-forcing layout of train_world.py).

Used by the world model's training and by tests/fixtures/make_world_fixture.py, whose fixture
the Rust forward is checked against, so what is trained is what is served.
"""

import torch
import torch.nn as nn
from diffusers.models.transformers.transformer_wan import WanAttnProcessor

ACTIONS = ["none", "up", "down", "left", "right"]


class ActionEmbedder(nn.Module):
    """`proj(embedding[a])`, saved as action_embedder/ (embedding.weight, proj.weight, proj.bias)."""

    def __init__(self, dim, n=len(ACTIONS)):
        super().__init__()
        self.embedding = nn.Embedding(n, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, ids):
        return self.proj(self.embedding(ids))


class _MaskedSelfAttention(WanAttnProcessor):
    """The stock processor, with the mask set on it applied to self-attention only."""

    def __init__(self):
        super().__init__()
        self.mask = None

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        if encoder_hidden_states is None:
            attention_mask = self.mask
        return super().__call__(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)


def sees(start, chunk, key, window=None, sink=0):
    """Whether a query in the chunk of `chunk` frames starting at `start` sees key frame `key`
    (the rule of causal.rs `Visibility::sees`)."""
    if key >= start:
        return key < start + chunk
    if window is None:
        return True
    room = max(window - chunk, 0)
    if start <= room:
        return True
    sinks = min(sink, room)
    return key < sinks or key >= start - (room - sinks)


class CausalWan:
    """Wraps a WanTransformer3DModel in place; call it like the model with the extras below."""

    def __init__(self, transformer):
        self.tr = transformer
        self.proc = _MaskedSelfAttention()
        for block in transformer.blocks:
            block.attn1.set_processor(self.proc)
        self.cond = None
        self.rope = None
        ce = transformer.condition_embedder
        rope_forward = transformer.rope.forward

        def condition(timestep, encoder_hidden_states, encoder_hidden_states_image=None, timestep_seq_len=None):
            t = ce.timesteps_proj(timestep)
            if timestep_seq_len is not None:
                t = t.unflatten(0, (-1, timestep_seq_len))
            t = t.to(next(iter(ce.time_embedder.parameters())).dtype)
            temb = ce.time_embedder(t).type_as(encoder_hidden_states)
            if self.cond is not None:
                temb = temb + self.cond.type_as(temb)
            return temb, ce.time_proj(ce.act_fn(temb)), ce.text_embedder(encoder_hidden_states), None

        ce.forward = condition
        # The stock rotary tables (positions 0..F), for building other layouts from.
        self.base_rope = rope_forward
        transformer.rope.forward = lambda hs: self.rope if self.rope is not None else rope_forward(hs)

    def tokens_per_frame(self, latents):
        _, ph, pw = self.tr.config.patch_size
        return (latents.shape[3] // ph) * (latents.shape[4] // pw)

    def __call__(self, latents, frame_timesteps, context, frame_cond=None, mask=None, rope=None):
        """`latents [B, C, F, H, W]`, `frame_timesteps [B, F]`, `frame_cond [B, F, dim]` (action
        embeddings), `mask [F, F]` over frames (True = attend), `rope` (cos, sin) per token."""
        n = self.tokens_per_frame(latents)
        ts = frame_timesteps.repeat_interleave(n, dim=1)
        self.cond = None if frame_cond is None else frame_cond.repeat_interleave(n, dim=1)
        self.proc.mask = None if mask is None else mask.repeat_interleave(n, 0).repeat_interleave(n, 1)
        self.rope = rope
        try:
            return self.tr(latents, ts, context, return_dict=False)[0]
        finally:
            self.cond, self.proc.mask, self.rope = None, None, None


def frame_mask(frames, chunk, window=None, sink=0, device=None):
    """`[F, F]` block-causal mask: row q (a query frame), column k (a key frame)."""
    m = torch.zeros(frames, frames, dtype=torch.bool, device=device)
    for q in range(frames):
        start = q // chunk * chunk
        for k in range(frames):
            m[q, k] = sees(start, chunk, k, window, sink)
    return m


def teacher_forcing_mask(frames, window=None, sink=0, device=None):
    """`[2F, 2F]` over [clean frames | noisy frames] (one frame per chunk): clean frames attend
    block-causally to clean frames; noisy frame i attends to itself and to the clean frames a
    rollout would hold when generating frame i — exactly what the Rust rollout computes."""
    m = torch.zeros(2 * frames, 2 * frames, dtype=torch.bool, device=device)
    m[:frames, :frames] = frame_mask(frames, 1, window, sink, device)
    for i in range(frames):
        for k in range(i):
            m[frames + i, k] = sees(i, 1, k, window, sink)
        m[frames + i, frames + i] = True
    return m
