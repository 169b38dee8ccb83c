"""The trainer's side of RL through `fastvideo serve`: the rollout client, the Flow-GRPO
log-probability written against diffusers' classes, and weight pushes.

Nothing here imports fastvideo: the server is reached over HTTP (`POST /v1/rollouts`,
`POST /v1/weights`), and the model is the same diffusers-layout folder the server loaded, run by
diffusers' `WanTransformer3DModel` and transformers' `UMT5EncoderModel`.
"""

import json
import math
import struct
import urllib.request

import torch
from safetensors.torch import load as load_safetensors
from transformers import AutoTokenizer, UMT5EncoderModel

SQRT_2PI_LOG = math.log(math.sqrt(2 * math.pi))


# ---------------------------------------------------------------- the server


def _post(url, body, content_type="application/json", timeout=3600):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type}, method="POST")
    return urllib.request.urlopen(req, timeout=timeout)


def safetensors_metadata(blob):
    """The `__metadata__` of a safetensors file held in memory."""
    (n,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8 : 8 + n]).get("__metadata__", {})


def rollouts(server, body):
    """Yields one dict per finished sample of `POST /v1/rollouts`: its tensors (`latents`,
    `trajectory.*`, `video`) and its metadata (`prompt`, `prompt_index`, `group_index`, `seed`,
    `weight_epoch`, `rewards` parsed); a failed sample has `error` instead of tensors."""
    with _post(f"{server}/v1/rollouts", body) as res:
        total = int(res.headers.get("x-rollout-samples", "0"))
        for _ in range(total):
            head = res.read(8)
            if len(head) < 8:
                raise RuntimeError("rollout stream ended early")
            (n,) = struct.unpack("<Q", head)
            blob = res.read(n)
            meta = safetensors_metadata(blob)
            sample = {k: v for k, v in meta.items()}
            for k in ("prompt_index", "group_index", "seed", "weight_epoch"):
                if k in sample:
                    sample[k] = int(sample[k])
            if "rewards" in sample:
                sample["rewards"] = json.loads(sample["rewards"])
            if "noise_level" in sample:
                sample["noise_level"] = float(sample["noise_level"])
            if "error" not in sample:
                sample["tensors"] = load_safetensors(blob)
            yield sample


def push_weights(server, path):
    """`POST /v1/weights {"path": ...}`: the server loads them and answers the new epoch."""
    with _post(f"{server}/v1/weights", {"path": str(path)}) as res:
        return json.loads(res.read())


def get_weights(server):
    with urllib.request.urlopen(f"{server}/v1/weights", timeout=60) as res:
        return json.loads(res.read())


# ---------------------------------------------------------------- the model


def load_transformer(folder):
    """diffusers' WanTransformer3DModel from a transformer folder, in float32 (built from its
    config and loaded strictly, so it needs no `accelerate`)."""
    from diffusers import WanTransformer3DModel
    from safetensors.torch import load_file

    model = WanTransformer3DModel.from_config(WanTransformer3DModel.load_config(folder))
    model.load_state_dict(load_file(f"{folder}/diffusion_pytorch_model.safetensors"), strict=True)
    return model.float()


class TextEncoder:
    """Prompt embeddings as the engine makes them: tokens padded to `max_len`, UMT5, positions
    past the prompt zeroed (diffusers' WanPipeline trims and re-pads with zeros: the same)."""

    def __init__(self, model_dir, max_len):
        self.tokenizer = AutoTokenizer.from_pretrained(f"{model_dir}/tokenizer")
        self.encoder = UMT5EncoderModel.from_pretrained(f"{model_dir}/text_encoder").eval()
        self.max_len = max_len
        self.cache = {}

    @torch.no_grad()
    def __call__(self, text):
        if text not in self.cache:
            enc = self.tokenizer(
                [text], padding="max_length", max_length=self.max_len, truncation=True,
                add_special_tokens=True, return_attention_mask=True, return_tensors="pt",
            )
            h = self.encoder(enc.input_ids, enc.attention_mask).last_hidden_state
            self.cache[text] = h * enc.attention_mask.unsqueeze(-1).to(h.dtype)
        return self.cache[text]


def guided_velocity(transformer, latents, timestep, cond, uncond, guidance):
    """The engine's classic CFG: uncond + s·(cond − uncond), one forward per branch."""
    t = torch.tensor([timestep], dtype=torch.float32)
    v_cond = transformer(latents, t, cond, return_dict=False)[0]
    if guidance <= 1.0:
        return v_cond
    v_uncond = transformer(latents, t, uncond, return_dict=False)[0]
    return v_uncond + guidance * (v_cond - v_uncond)


def sde_log_prob(velocity, sample, next_sample, sigma, sigma_next, sigma_max, noise_level):
    """Flow-GRPO's SDE transition log-probability of `next_sample` (mean over elements), with
    σ = 1 replaced by `sigma_max` (the schedule's second sigma). Float32, differentiable in
    `velocity`."""
    v = velocity.float()
    x = sample.float()
    dt = sigma_next - sigma
    std_dev_t = math.sqrt(sigma / (1 - (sigma_max if sigma == 1.0 else sigma))) * noise_level
    mean = x * (1 + std_dev_t**2 / (2 * sigma) * dt) + v * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
    std = std_dev_t * math.sqrt(-dt)
    lp = -((next_sample.float() - mean) ** 2) / (2 * std**2) - math.log(std) - SQRT_2PI_LOG
    return lp.mean(dim=tuple(range(1, lp.ndim)))


def step_latents(sample):
    """`{boundary: latent}` of a sample's trajectory (boundary i = the sample before step i)."""
    steps = sample["tensors"]["trajectory.latent_steps"].tolist()
    lat = sample["tensors"]["trajectory.latents"]
    return {int(s): lat[i] for i, s in enumerate(steps)}


def recompute_log_probs(transformer, text, sample, guidance, negative_prompt=""):
    """Every stochastic step's log-probability of a captured trajectory under `transformer`
    (the C1 check, and the trainer's new log-probabilities)."""
    tr = sample["tensors"]
    sigmas = tr["trajectory.sigmas"].tolist()
    timesteps = tr["trajectory.timesteps"].tolist()
    lat = step_latents(sample)
    cond, uncond = text(sample["prompt"]), text(negative_prompt)
    out = []
    for i in tr["trajectory.sde_steps"].tolist():
        v = guided_velocity(transformer, lat[i], timesteps[i], cond, uncond, guidance)
        out.append(sde_log_prob(v, lat[i], lat[i + 1], sigmas[i], sigmas[i + 1], sigmas[1], sample["noise_level"]))
    return torch.cat(out)
