#!/usr/bin/env bash
# What a live preview costs at real size, one call: a random-weight Wan2.1-1.3B folder
# (make_wan13b.py), then `fastvideo bench` at 480x832x81 in bf16, whose report times one preview
# (`preview_s`: pooled last latent frame, VAE decode, JPEG) beside a CFG step (`cfg_step_s`).
# Carry .gpu-pack/fastvideo.xz and .gpu-pack/site.tar.xz (diffusers, for the folder).
#   env  MODEL=/tmp/wan13b  OUT=/tmp/out
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/wan13b}"
OUT="${OUT:-/tmp/out}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
[ -f "$MODEL/model_index.json" ] || python3 host/scripts/gpu/make_wan13b.py "$MODEL" --device cuda >"$OUT/make.txt" 2>&1
"$BIN" bench --model "$MODEL" --device cuda --dtype bf16 --frames 81 --height 480 --width 832 --runs 3 --json \
  >"$OUT/bench.json" 2>"$OUT/bench.log"
python3 - "$OUT/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
step, preview = r["cfg_step_s"], r["preview_s"]
print(json.dumps({"cfg_step_s": step, "preview_s": preview, "preview_per_step": preview / step,
                  "vae_decode_s": r["vae_decode_s"]}))
PY
