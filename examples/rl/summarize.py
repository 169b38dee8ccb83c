"""Prints a trainer log (WORK/log.jsonl) as the markdown tables docs/rl.md shows."""

import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
evals = [r for r in rows if r["event"] == "eval"]
train = [r for r in rows if r["event"] == "train"]
print("| iteration | held-out reward | color_match | motion_direction |")
print("|---|---|---|---|")
for r in evals:
    print(f"| {r['iteration']} | {r['reward']:.3f} | {r['color_match']:.3f} | {r['motion_direction']:.3f} |")
if train:
    mean = lambda k: sum(r[k] for r in train) / len(train)  # noqa: E731
    print()
    print(f"{len(train)} iterations; per iteration: rollouts {mean('rollout_s'):.1f} s "
          f"({mean('samples_per_s'):.2f} samples/s), training {mean('train_s'):.1f} s, weight push "
          f"{mean('push_s') * 1000:.0f} ms; max c1_logprob_diff {max(r['c1_logprob_diff'] for r in train):.2g}; "
          f"mean clip fraction {mean('clip_frac'):.3f}")
    k = max(1, len(train) // 5)
    first = sum(r["reward"] for r in train[:k]) / k
    last = sum(r["reward"] for r in train[-k:]) / k
    print(f"training reward (flow_sde rollouts), first {k} vs last {k} iterations: {first:.3f} -> {last:.3f}")
