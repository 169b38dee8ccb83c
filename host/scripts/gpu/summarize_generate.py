"""Medians over a stream of `fastvideo generate --json` reports (pretty-printed, one after another)."""
import json
import statistics
import sys

text, dec, ms = sys.stdin.read(), json.JSONDecoder(), []
i = 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i == len(text):
        break
    o, i = dec.raw_decode(text, i)
    ms.append(o["metrics"])
node = {k: statistics.median(dict(m["node_seconds"])[k] for m in ms) for k in dict(ms[0]["node_seconds"])}
print(json.dumps({
    "runs": len(ms),
    # The first step of a process pays one-time CUDA costs (kernel compiles, cuDNN plans).
    "first_step_s": statistics.median(m["step_seconds"][0] for m in ms),
    "step_p50_s": statistics.median(statistics.median(m["step_seconds"][1:] or m["step_seconds"]) for m in ms),
    "total_s": statistics.median(m["total_seconds"] for m in ms),
    "forwards_per_step": ms[0]["forwards"] / ms[0]["steps"],
    "node_seconds": node,
}))
