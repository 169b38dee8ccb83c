#!/usr/bin/env bash
# The default model end to end on the GPU (generate, its default 17x64x64 clip with CFG), RUNS
# runs after a warm-up: per-step and per-node seconds, for the launch-bound regime. Run from the
# repo root on the GPU machine with the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo}.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
"$BIN" generate --device cuda --prompt warmup --seed 0 --out /tmp/small.mp4 --quiet >/dev/null
for variant in batched one_by_one; do
  # one_by_one: the guidance branches as separate forwards (FASTVIDEO_NO_BRANCH_BATCH, a diagnostic)
  for i in $(seq 1 "${RUNS:-5}"); do
    if [ "$variant" = one_by_one ]; then export FASTVIDEO_NO_BRANCH_BATCH=1; fi
    "$BIN" generate --device cuda --prompt "a red circle moving left on a white background" --seed "$i" \
      --out /tmp/small.mp4 --quiet --json
  done | python3 host/scripts/gpu/summarize_generate.py | sed "s/^/$variant: /"
done
