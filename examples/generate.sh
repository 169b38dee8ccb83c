#!/usr/bin/env bash
# A few generations with the default model (run from the repository root after
# `bash host/scripts/bootstrap.sh`). Each writes an MP4 into ./out/.
set -euo pipefail
mkdir -p out
fv() { cargo run --release --quiet -p fastvideo -- generate "$@"; }
fv --prompt "a red circle moving left on a white background" --out out/circle.mp4
fv --prompt "a blue square growing" --seed 7 --steps 10 --sampler euler --out out/square-euler.mp4
fv --prompt "a yellow star moving up" --frames 33 --height 96 --width 128 --frames-dir out/star-frames --out out/star.mp4
