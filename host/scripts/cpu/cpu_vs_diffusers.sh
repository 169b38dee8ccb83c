#!/usr/bin/env bash
# The default clip on this CPU, ours against diffusers' WanPipeline on the same checkpoint and
# settings, run one after the other in one call (median of RUNS clips each, after a warm-up).
#   bash host/scripts/cpu/cpu_vs_diffusers.sh            # RUNS=5, PYTHON=python with diffusers
# Ours: the release binary (built if missing). Python: $PYTHON, or a venv made here from
# tests/fixtures/requirements.txt on first use (.venv-ref, ~1 GB).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
runs=${RUNS:-5}
bin=${FASTVIDEO_BIN:-target/release/fastvideo}
[ -x "$bin" ] || cargo build --release -p fastvideo
py=${PYTHON:-}
if [ -z "$py" ]; then
  [ -x .venv-ref/bin/python ] || { python3 -m venv .venv-ref && .venv-ref/bin/pip install -q -r tests/fixtures/requirements.txt; }
  py=.venv-ref/bin/python
fi
"$bin" generate --prompt "a red circle moving left on a white background" --seed 0 --out /tmp/cpu_bench.mp4 --quiet >/dev/null
ours=()
for i in $(seq 1 "$runs"); do
  ours+=("$("$bin" generate --prompt "a red circle moving left on a white background" --seed "$i" --out /tmp/cpu_bench.mp4 --quiet --json)")
done
theirs=$("$py" host/scripts/cpu/diffusers_default.py models/default "$runs" 2>/dev/null | tail -1)
python3 - "$theirs" "${ours[@]}" <<'PY'
import json, statistics, sys
theirs = json.loads(sys.argv[1])
ours = [json.loads(o)["metrics"] for o in sys.argv[2:]]
clip = statistics.median(m["total_seconds"] for m in ours)
dec = statistics.median(dict(m["node_seconds"])["vae_decode"] for m in ours)
den = statistics.median(dict(m["node_seconds"])["denoise"] for m in ours)
print(f"| | ours | diffusers | diffusers / ours |\n|---|---|---|---|")
print(f"| default clip (20 steps, CFG, 17x64x64) | {clip:.3f} s | {theirs['clip_s']:.3f} s | {theirs['clip_s'] / clip:.2f}x |")
print(f"| VAE decode | {dec:.3f} s | {theirs['vae_decode_s']:.3f} s | {theirs['vae_decode_s'] / dec:.2f}x |")
print(f"| denoise (ours) | {den:.3f} s | | |")
print(f"(median of {len(ours)} each; torch threads {theirs['threads']})")
PY
