"""Medians over a stream of `fastvideo generate --json` reports (pretty-printed, one after another).

    python3 summarize_generate.py [STDERR_LOG...] < reports

Node names are the model's (LTX-2: encode_prompt, denoise, upsample and refine with --two-stage,
decode_video, assemble, decode_audio — the audio VAE and the vocoder); a node missing from some
runs has the median of the runs that have it. Given the runs' stderr logs (generate without
--quiet), also the largest device-memory peak they print (load included) as peak_*_gib.
"""
import json
import re
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
names = list(dict.fromkeys(k for m in ms for k, _ in m["node_seconds"]))
node = {k: statistics.median(dict(m["node_seconds"])[k] for m in ms if k in dict(m["node_seconds"])) for k in names}
out = {
    "runs": len(ms),
    "steps": ms[0]["steps"],
    # The first step of a process pays one-time CUDA costs (kernel compiles, cuDNN plans).
    "first_step_s": statistics.median(m["step_seconds"][0] for m in ms),
    "step_p50_s": statistics.median(statistics.median(m["step_seconds"][1:] or m["step_seconds"]) for m in ms),
    "total_s": statistics.median(m["total_seconds"] for m in ms),
    "forwards_per_step": ms[0]["forwards"] / ms[0]["steps"],
    "node_seconds": node,
}
peaks = []
for path in sys.argv[1:]:
    with open(path, errors="replace") as f:
        for line in f:
            p = re.search(r"device memory: peak ([\d.]+) GiB allocated, ([\d.]+) GiB reserved", line)
            if p:
                peaks.append((float(p.group(1)), float(p.group(2))))
if peaks:
    out["peak_allocated_gib"] = max(p[0] for p in peaks)
    out["peak_reserved_gib"] = max(p[1] for p in peaks)
print(json.dumps(out))
