#!/usr/bin/env bash
# Language-model speed on the GPU, one call: a random-weight Qwen3-1.7B folder (make_qwen.py),
# then `fastvideo bench-lm` and transformers' generate (eager, and static cache + torch.compile)
# on the same folder and token ids. Figures into $OUT. Carry .gpu-pack/fastvideo.xz and the
# wheels (.gpu-pack/site.tar.xz) for transformers.
#   env  MODEL=/tmp/qwen17b  BATCHES=1,8,32,128  STEPS=32  NO_COMPILE=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/qwen17b}"
OUT="${OUT:-/tmp/out}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
[ -f "$MODEL/config.json" ] || python3 host/scripts/gpu/make_qwen.py "$MODEL" >"$OUT/make.txt" 2>&1
"$BIN" bench-lm --lm "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" --json | tee "$OUT/ours.json"
# The same with the paged decode kernel off (pages gathered, then SDPA).
FASTVIDEO_NO_KERNELS=1 "$BIN" bench-lm --lm "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" --json \
  >"$OUT/ours_gathered.json"
# Every line kept (eager's figures survive a compile that runs out of time).
python3 host/scripts/gpu/transformers_lm_bench.py "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" \
  ${NO_COMPILE:+--no-compile} 2>"$OUT/transformers.err" | tee "$OUT/transformers.txt"
