#!/usr/bin/env bash
# The quality gate of the precision presets at real size, run from the repo root on the GPU
# machine: one whole generation per preset on the same random-weight folder, prompt and seed,
# frames written losslessly (PNG), then each preset's PSNR against bf16 and its denoise time.
# What passes goes in `fast` (docs/benchmarks.md, "Precision presets").
#   needs  the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo} (or .gpu-pack/fastvideo.xz) and a
#          model folder (bench.sh's `make` stage builds /tmp/wan13b)
#   env    MODEL=/tmp/wan13b OUT=/tmp/precision PRESETS="bf16 fast" STEPS=20 DEVICE=cuda
#          FRAMES/HEIGHT/WIDTH (81x480x832)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/wan13b}"
OUT="${OUT:-/tmp/precision}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
PRESETS="${PRESETS:-bf16 fast}"
mkdir -p "$OUT"
if [ ! -x "$BIN" ] && [ -f .gpu-pack/fastvideo.xz ]; then
  mkdir -p "$(dirname "$BIN")" && xz -dc .gpu-pack/fastvideo.xz >"$BIN" && chmod +x "$BIN"
fi
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh

for p in $PRESETS; do
  rm -rf "$OUT/frames_$p"
  "$BIN" generate --model "$MODEL" --device "${DEVICE:-cuda}" --precision "$p" --prompt "a red circle moving left" \
    --seed 0 --steps "${STEPS:-20}" --frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}" \
    --out "$OUT/$p.mp4" --frames-dir "$OUT/frames_$p" --json --quiet >"$OUT/gen_$p.json"
done

python3 - "$OUT" $PRESETS <<'PY'
import glob, json, math, os, sys
import numpy as np
from PIL import Image
out, presets = sys.argv[1], sys.argv[2:]
def frames(p):
    return [np.asarray(Image.open(f), dtype=np.float64) for f in sorted(glob.glob(f"{out}/frames_{p}/*.png"))]
def psnr(a, b):
    mse = np.mean([np.mean((x - y) ** 2) for x, y in zip(a, b)])
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)
base = frames("bf16") if "bf16" in presets else None
rows = {}
for p in presets:
    m = json.load(open(f"{out}/gen_{p}.json"))["metrics"]
    denoise = dict(m["node_seconds"]).get("denoise")
    rows[p] = {"denoise_s": denoise, "steps": m["steps"], "total_s": m["total_seconds"],
               "psnr_vs_bf16_db": psnr(frames(p), base) if base is not None and p != "bf16" else None}
    print(p, rows[p])
json.dump(rows, open(f"{out}/precision_gate.json", "w"), indent=1)
PY
