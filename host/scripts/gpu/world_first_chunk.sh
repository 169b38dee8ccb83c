#!/usr/bin/env bash
# A world session's first chunk on the H200, in a fresh process and in a warmed one (what
# `fastvideo serve --world` does at load on CUDA: `fastvideo world --warm-up`), through
# world_bench.sh (random-weight 1.3B causal, 4 steps, 3-latent chunks, 480x832, tiny decoder).
# Run from the repo root on the GPU machine; carry .gpu-pack/fastvideo.xz. Figures into $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
export MAKE_ARGS="${MAKE_ARGS:---device cuda}" CHUNKS="${CHUNKS:-20}" OUT
export VARIANTS="${VARIANTS:-tiny:--tiny-decoder;tiny_warm:--tiny-decoder --warm-up;int8_warm:--tiny-decoder --precision bf16 --int8-attention --warm-up}"
bash host/scripts/gpu/world_bench.sh 2>&1 | tee "$OUT/world_first_chunk.txt"
