#!/usr/bin/env bash
# A 4-step distilled image-to-video clip at real size, end to end: a random-weight
# Wan2.1-I2V-14B-480P folder (make_wan_i2v.py) run as LightX2V's distilled models are, 4 steps on
# the list 1000,750,500,250 at shift 5 with guidance 1 and the dmd sampler, 81 frames at 480x832,
# from a picture to the MP4, after one warm-up run (same settings). Prints the JSON summary of
# each run. The weights are random, so the clip is noise: this measures time, not quality.
# Written 2026-12-06 for issue 58 and not yet run: the GPU machine gave no start that evening.
# Run from the repo root on the GPU machine with the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo}.
#   env  MODEL=/tmp/wan-i2v-14b  RUNS=1
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
MODEL="${MODEL:-/tmp/wan-i2v-14b}"
[ -f "$MODEL/model_index.json" ] || python3 host/scripts/gpu/make_wan_i2v.py "$MODEL" --device cuda
nvidia-smi --query-gpu=name --format=csv,noheader
run() {
  /usr/bin/time -f "wall %e s, peak host RSS %M KiB" "$BIN" generate --device cuda --model "$MODEL" \
    --image tests/fixtures/i2v_first_frame.png --prompt "a cat walks across a sunny garden" \
    --frames 81 --height 480 --width 832 --timesteps 1000,750,500,250 --shift 5 --guidance 1 --sampler dmd \
    --seed "$1" --out /tmp/few_step_i2v.mp4 --json
}
run 0 >/dev/null
for i in $(seq 1 "${RUNS:-1}"); do run "$i"; done
