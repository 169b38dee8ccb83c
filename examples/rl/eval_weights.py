"""Scores transformer weights on the held-out prompts through a running server: pushes each
folder given (`POST /v1/weights`) and prints the mean rewards of the same prompts and seeds.

    python examples/rl/eval_weights.py --server http://127.0.0.1:8123 --steps 20 --sampler unipc \\
        models/default/transformer /tmp/rl/transformer
"""

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fvrl  # noqa: E402
import train_grpo  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="http://127.0.0.1:8000")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--sampler", default="unipc")
    ap.add_argument("--guidance", type=float, default=4.0)
    ap.add_argument("--prompts", type=int, default=24)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--seed", type=int, default=424242)
    ap.add_argument("weights", nargs="+", help="transformer folders or .safetensors files")
    args = ap.parse_args()
    held = [p for p, h in train_grpo.scenes() if h]
    prompts = random.Random(7).sample(held, min(args.prompts, len(held)))
    rewards = ["color_match", "motion_direction"]
    for w in args.weights:
        epoch = fvrl.push_weights(args.server, os.path.abspath(w))["epoch"]
        body = dict(prompts=prompts, group_size=args.group, seed=args.seed, sampler=args.sampler,
                    num_inference_steps=args.steps, guidance_scale=args.guidance, rewards=rewards,
                    return_latents=False, return_trajectory=False)
        got = [s for s in fvrl.rollouts(args.server, body)]
        assert all(s["weight_epoch"] == epoch for s in got)
        mean = {r: sum(s["rewards"][r] for s in got) / len(got) for r in rewards}
        print(json.dumps({"weights": w, "steps": args.steps, "sampler": args.sampler, "samples": len(got), **mean}))


if __name__ == "__main__":
    main()
