"""Rollout throughput of a running `fastvideo serve` (stdlib only, for the GPU machine): POSTs
one /v1/rollouts per setting and prints samples/s, and the mean rewards when asked for.

    python3 rollout_rate.py URL PROMPTS GROUP STEPS SIZE FRAMES [REWARDS] [SAMPLER]

REWARDS is a comma list or `-` for none; SAMPLER `flow_sde` (default, with trajectories) or
`euler` (nothing but the final latents).
"""

import json
import struct
import sys
import time
import urllib.request

url, n_prompts, group, steps, size, frames = sys.argv[1:7]
rewards = [r for r in sys.argv[7].split(",") if r != "-"] if len(sys.argv) > 7 else []
sampler = sys.argv[8] if len(sys.argv) > 8 else "flow_sde"
prompts = [f"a {c} circle moving left on a white background" for c in ["red", "green", "blue", "yellow", "purple", "orange", "red", "blue"]][: int(n_prompts)]
body = dict(prompts=prompts, group_size=int(group), seed=1, num_inference_steps=int(steps), width=int(size),
            height=int(size), num_frames=int(frames), rewards=rewards, sampler=sampler,
            return_trajectory=sampler == "flow_sde")
t0 = time.time()
req = urllib.request.Request(f"{url}/v1/rollouts", data=json.dumps(body).encode(),
                             headers={"Content-Type": "application/json"}, method="POST")
got, scores, nbytes = 0, {r: [] for r in rewards}, 0
with urllib.request.urlopen(req, timeout=600) as res:
    total = int(res.headers["x-rollout-samples"])
    for _ in range(total):
        (n,) = struct.unpack("<Q", res.read(8))
        blob = res.read(n)
        nbytes += n
        (h,) = struct.unpack("<Q", blob[:8])
        meta = json.loads(blob[8 : 8 + h])["__metadata__"]
        assert "error" not in meta, meta
        for r, v in json.loads(meta["rewards"]).items():
            scores[r].append(v)
        got += 1
dt = time.time() - t0
out = dict(sampler=sampler, prompts=len(prompts), group=int(group), steps=int(steps), size=int(size), frames=int(frames), samples=got,
           seconds=round(dt, 2), samples_per_s=round(got / dt, 2), mb_per_sample=round(nbytes / got / 1e6, 3))
out.update({r: round(sum(v) / len(v), 3) for r, v in scores.items() if v})
print(json.dumps(out), flush=True)
