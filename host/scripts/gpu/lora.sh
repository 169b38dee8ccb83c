#!/usr/bin/env bash
# shellcheck disable=SC2329  # the stage functions are called through stage()
# LoRA on the GPU machine, from the repo root (no network there): the adapter benchmark at real
# size, and the training of the shipped adapter (models/default-lora-large).
#   needs  .whl/ (fetch_wheels.sh; diffusers and importlib_metadata are enough) and the release
#          binary at .gpu-pack/fastvideo.xz (xz -9 of the stripped binary; or .gz, or at
#          $FASTVIDEO_BIN); python3 with torch 2.11.0+cu130 and transformers 5
#   env    STAGES="bench train" (the default)  OUT=/tmp/lora  MODEL=/tmp/wan13b
#          RANKS=32,128 BATCH=4 RUNS=3 FRAMES=81 HEIGHT=480 WIDTH=832   (bench)
#          MINUTES=5 CLIPS=24000 TRAIN_BATCH=256                         (train)
# Writes $OUT/lora_bench.json and $OUT/lora.safetensors (+ .log.jsonl, .state.json).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
STAGES="${STAGES:-bench train}"
OUT="${OUT:-/tmp/lora}"
MODEL="${MODEL:-/tmp/wan13b}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
mkdir -p "$OUT"
# The binary travels compressed (the 64 MiB a call carries): .xz, else .gz.
if [ ! -x "$BIN" ] && [ -f .gpu-pack/fastvideo.xz ]; then
  mkdir -p "$(dirname "$BIN")" && xz -dc .gpu-pack/fastvideo.xz > "$BIN" && chmod +x "$BIN"
elif [ ! -x "$BIN" ] && [ -f .gpu-pack/fastvideo.gz ]; then
  mkdir -p "$(dirname "$BIN")" && gunzip -c .gpu-pack/fastvideo.gz > "$BIN" && chmod +x "$BIN"
fi
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh

# shellcheck source=host/scripts/gpu/stage.sh
source host/scripts/gpu/stage.sh

bench() {
  [ -f "$MODEL/model_index.json" ] || python3 host/scripts/gpu/make_wan13b.py "$MODEL" --device cuda
  "$BIN" bench-lora --model "$MODEL" --device cuda --frames "${FRAMES:-81}" --height "${HEIGHT:-480}" \
    --width "${WIDTH:-832}" --ranks "${RANKS:-32,128}" --batch "${BATCH:-4}" --runs "${RUNS:-3}" | tee "$OUT/lora_bench.json"
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
}

train() {
  "$BIN" dataset --out /tmp/large --clips "${CLIPS:-24000}" --seed 0 --style large
  python3 models/training/train_lora.py --data /tmp/large --init models/default --out "$OUT/lora.safetensors" \
    --minutes "${MINUTES:-5}" --batch "${TRAIN_BATCH:-256}" 2>&1 | grep -v -i "warn\|it/s\]"
  ls -la "$OUT"
}

stage bench bench
stage train train
