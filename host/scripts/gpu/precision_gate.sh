#!/usr/bin/env bash
# The quality gate of the lossy options at real size, run from the repo root on the GPU machine:
# one whole generation per variant on the same random-weight folder, prompt and seed, frames
# written losslessly (PNG), then each variant's PSNR against the first (bf16) and its denoise
# time. What passes (with `fastvideo eval`) goes in `--precision fast` (docs/benchmarks.md,
# "Precision presets").
#   needs  the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo} (or .gpu-pack/fastvideo.xz) and a
#          model folder (bench.sh's `make` stage builds /tmp/wan13b)
#   env    MODEL=/tmp/wan13b OUT=/tmp/precision STEPS=20 DEVICE=cuda
#          VARIANTS="bf16:--precision bf16;fp8:--precision bf16 --fp8-linears" (NAME:FLAGS; the first is the base;
#          leading VAR=value words are set in the run's environment, host/scripts/gpu/variant.sh)
#          FRAMES/HEIGHT/WIDTH (81x480x832)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/wan13b}"
OUT="${OUT:-/tmp/precision}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
VARIANTS="${VARIANTS:-bf16:--precision bf16;fp8:--precision bf16 --fp8-linears}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
# shellcheck source=host/scripts/gpu/variant.sh
source host/scripts/gpu/variant.sh

IFS=';' read -ra variants <<<"$VARIANTS"
names=()
for v in "${variants[@]}"; do
  p="${v%%:*}"
  names+=("$p")
  rm -rf "$OUT/frames_$p"
  # shellcheck disable=SC2086  # the variant's words
  variant_words ${v#*:}
  env ${VARIANT_ENV[@]+"${VARIANT_ENV[@]}"} "$BIN" generate --model "$MODEL" --device "${DEVICE:-cuda}" \
    ${VARIANT_FLAGS[@]+"${VARIANT_FLAGS[@]}"} --prompt "a red circle moving left" \
    --seed 0 --steps "${STEPS:-20}" --frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}" \
    --out "$OUT/$p.mp4" --frames-dir "$OUT/frames_$p" --json --quiet >"$OUT/gen_$p.json"
done

python3 - "$OUT" "${names[@]}" <<'PY'
import glob, json, math, os, sys
import numpy as np
from PIL import Image
out, presets = sys.argv[1], sys.argv[2:]
def frames(p):
    return [np.asarray(Image.open(f), dtype=np.float64) for f in sorted(glob.glob(f"{out}/frames_{p}/*.png"))]
def psnr(a, b):
    mse = np.mean([np.mean((x - y) ** 2) for x, y in zip(a, b)])
    return float("inf") if mse == 0 else 10 * math.log10(255.0**2 / mse)
base = frames(presets[0])
rows = {}
for p in presets:
    m = json.load(open(f"{out}/gen_{p}.json"))["metrics"]
    denoise = dict(m["node_seconds"]).get("denoise")
    rows[p] = {"denoise_s": denoise, "steps": m["steps"], "total_s": m["total_seconds"],
               f"psnr_vs_{presets[0]}_db": psnr(frames(p), base) if p != presets[0] else None}
    print(p, rows[p])
json.dump(rows, open(f"{out}/precision_gate.json", "w"), indent=1)
PY
