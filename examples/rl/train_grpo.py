"""A small Flow-GRPO trainer that uses `fastvideo serve` as its rollout engine (docs/rl.md).

Each iteration: ask the server for grouped rollouts of training prompts (`POST /v1/rollouts`,
`flow_sde` sampler, rewards scored by the server's reward plugins), normalize rewards within
each prompt's group, take PPO-clipped policy-gradient steps (minibatches) on the captured trajectories with
the transformer in PyTorch (diffusers' WanTransformer3DModel, the same weights the server runs),
save the weights and push them back (`POST /v1/weights`). The log-probabilities the engine
returned are the behaviour policy's (C1: same weights, fp32 both sides), so the first ratio of
every iteration is ~1; its distance from 1 is logged as `c1_logprob_diff`.

Held-out prompts (scene combinations the model never saw) are scored before training and every
`--eval-every` iterations with fixed seeds and the deterministic Euler sampler.

    python examples/rl/train_grpo.py --server http://127.0.0.1:8000 --model models/default \\
        --work /tmp/rl --iterations 20
"""

import argparse
import json
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fvrl  # noqa: E402

SHAPES = ["circle", "square", "triangle", "star", "cross"]
COLORS = ["red", "green", "blue", "yellow", "purple", "orange"]
MOTIONS = ["left", "right", "up", "down", "growing", "shrinking"]
BACKGROUNDS = ["white", "black", "gray"]


def scenes():
    """(prompt, held_out) of every scene, as host/procedural's vocabulary makes them."""
    out = []
    for si, s in enumerate(SHAPES):
        for ci, c in enumerate(COLORS):
            for mi, m in enumerate(MOTIONS):
                for bi, b in enumerate(BACKGROUNDS):
                    what = m if m in ("growing", "shrinking") else f"moving {m}"
                    held = (si + 2 * ci + 3 * mi + 5 * bi) % 9 == 4
                    out.append((f"a {c} {s} {what} on a {b} background", held))
    return out


def total_reward(rewards, weights):
    return sum(w * rewards[name] for name, w in weights.items())


def evaluate(args, weights, prompts, epoch):
    body = dict(prompts=prompts, group_size=args.eval_group, seed=args.eval_seed, sampler="euler",
                num_inference_steps=args.steps, guidance_scale=args.guidance, rewards=list(weights),
                return_latents=False, return_trajectory=False)
    per = {name: [] for name in weights}
    tot = []
    for s in fvrl.rollouts(args.server, body):
        if "error" in s:
            raise RuntimeError(f"eval sample failed: {s['error']}")
        assert s["weight_epoch"] == epoch, f"eval ran on epoch {s['weight_epoch']}, expected {epoch}"
        for name in weights:
            per[name].append(s["rewards"][name])
        tot.append(total_reward(s["rewards"], weights))
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"reward": mean(tot), **{name: mean(v) for name, v in per.items()}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default="models/default", help="the folder the server loaded")
    ap.add_argument("--work", required=True, help="where updated weights and the log go")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=6, help="training prompts per iteration")
    ap.add_argument("--group", type=int, default=6, help="samples per prompt (K)")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--sde-steps", default="", help="comma-separated stochastic steps (all when empty)")
    ap.add_argument("--noise-level", type=float, default=0.7)
    ap.add_argument("--guidance", type=float, default=4.0)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--clip", type=float, default=0.2)
    ap.add_argument("--minibatches", type=int, default=4, help="optimizer steps per iteration (PPO minibatches)")
    ap.add_argument("--reward-weights", default='{"color_match": 0.5, "motion_direction": 0.5}')
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-prompts", type=int, default=24)
    ap.add_argument("--eval-group", type=int, default=2)
    ap.add_argument("--eval-seed", type=int, default=424242)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    weights = json.loads(args.reward_weights)
    os.makedirs(args.work, exist_ok=True)
    log_path = os.path.join(args.work, "log.jsonl")
    log = open(log_path, "a")

    def record(**kw):
        kw["time"] = round(time.time(), 1)
        log.write(json.dumps(kw) + "\n")
        log.flush()
        print(json.dumps(kw), file=sys.stderr)

    run_cfg = json.load(open(os.path.join(args.model, "fastvideo.json")))
    transformer = fvrl.load_transformer(os.path.join(args.model, "transformer"))
    transformer.train()
    text = fvrl.TextEncoder(args.model, run_cfg.get("max_sequence_length", 512))
    negative = run_cfg.get("negative_prompt", "")
    opt = torch.optim.AdamW(transformer.parameters(), lr=args.lr, weight_decay=0.0)

    all_scenes = scenes()
    train = [p for p, held in all_scenes if not held]
    held_out = [p for p, held in all_scenes if held]
    eval_prompts = random.Random(7).sample(held_out, min(args.eval_prompts, len(held_out)))
    # Start the server on exactly the weights trained here (whatever it served before).
    out = os.path.join(args.work, "transformer")
    transformer.save_pretrained(out, safe_serialization=True)
    epoch = fvrl.push_weights(args.server, out)["epoch"]
    record(event="start", epoch=epoch, args=vars(args), train_prompts=len(train), eval_prompts=len(eval_prompts))
    record(event="eval", iteration=0, epoch=epoch, **evaluate(args, weights, eval_prompts, epoch))

    sde_steps = [int(s) for s in args.sde_steps.split(",") if s.strip()] or None
    for it in range(1, args.iterations + 1):
        t0 = time.time()
        prompts = rng.sample(train, args.prompts)
        body = dict(prompts=prompts, group_size=args.group, seed=rng.randrange(1 << 40), sampler="flow_sde",
                    noise_level=args.noise_level, num_inference_steps=args.steps, guidance_scale=args.guidance,
                    rewards=list(weights), return_latents=False, return_trajectory=True)
        if sde_steps:
            body["sde_steps"] = sde_steps
        samples = [s for s in fvrl.rollouts(args.server, body) if "error" not in s]
        rollout_s = time.time() - t0
        stale = [s for s in samples if s["weight_epoch"] != epoch]
        assert not stale, f"{len(stale)} samples ran on another epoch than {epoch}"
        # Group-relative advantages.
        for s in samples:
            s["r"] = total_reward(s["rewards"], weights)
        groups = {}
        for s in samples:
            groups.setdefault(s["prompt_index"], []).append(s)
        for g in groups.values():
            rs = torch.tensor([s["r"] for s in g])
            std = rs.std() if len(g) > 1 else torch.tensor(0.0)
            for s in g:
                s["adv"] = float(((s["r"] - rs.mean()) / (std + 1e-4)).clamp(-5, 5))
        # PPO-clipped policy gradient over every stochastic step of every sample.
        t1 = time.time()
        diffs, clipped, losses = [], [], []
        n_terms = sum(len(s["tensors"]["trajectory.sde_steps"]) for s in samples)
        order = samples[:]
        rng.shuffle(order)
        batches = [order[i :: args.minibatches] for i in range(args.minibatches)]
        for b, batch in enumerate(batches):
            if not batch:
                continue
            opt.zero_grad()
            terms = sum(len(s["tensors"]["trajectory.sde_steps"]) for s in batch)
            for s in batch:
                old = s["tensors"]["trajectory.log_probs"]
                new = fvrl.recompute_log_probs(transformer, text, s, args.guidance, negative)
                if b == 0:
                    # Before any update: the trainer's log-probs against the engine's (C1).
                    diffs.extend((new.detach() - old).abs().tolist())
                ratio = torch.exp(new - old)
                adv = s["adv"]
                loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - args.clip, 1 + args.clip)).sum() / terms
                loss.backward()
                losses.append(loss.item())
                clipped.extend(((ratio.detach() - 1).abs() > args.clip).float().tolist())
            torch.nn.utils.clip_grad_norm_(transformer.parameters(), 1.0)
            opt.step()
        train_s = time.time() - t1
        transformer.save_pretrained(out, safe_serialization=True)
        t2 = time.time()
        epoch = fvrl.push_weights(args.server, out)["epoch"]
        push_s = time.time() - t2
        mean = lambda v: sum(v) / max(len(v), 1)  # noqa: E731
        record(event="train", iteration=it, epoch=epoch, reward=mean([s["r"] for s in samples]),
               samples=len(samples), sde_terms=n_terms, c1_logprob_diff=max(diffs) if diffs else 0.0,
               clip_frac=mean(clipped), loss=round(sum(losses), 6), rollout_s=round(rollout_s, 2),
               samples_per_s=round(len(samples) / rollout_s, 2), train_s=round(train_s, 2), push_s=round(push_s, 2))
        if it % args.eval_every == 0 or it == args.iterations:
            record(event="eval", iteration=it, epoch=epoch, **evaluate(args, weights, eval_prompts, epoch))
    print(f"log: {log_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
