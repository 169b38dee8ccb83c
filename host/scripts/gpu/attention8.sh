#!/usr/bin/env bash
# Run on the GPU machine from the repo root: the 8-bit attention's parity test (the kernels'
# parity binary, all of its tests) and its microbenchmark against SDPA, figures into $OUT.
# Carry .gpu-pack/kernels-parity.xz and .gpu-pack/attention8-bench.xz, built here by
#   cargo test --release -p fastvideo-kernels --test parity --no-run
#   cargo bench -p fastvideo-kernels --bench attention8 --no-run
# (strip, then xz -9 each to those names).
set -euo pipefail
source host/scripts/gpu/torch_env.sh
mkdir -p .gpu "${OUT:-/tmp/out}"
out=${OUT:-/tmp/out}
xz -dc .gpu-pack/kernels-parity.xz > .gpu/kernels-parity && chmod +x .gpu/kernels-parity
xz -dc .gpu-pack/attention8-bench.xz > .gpu/attention8-bench && chmod +x .gpu/attention8-bench
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
FASTVIDEO_LOG=${FASTVIDEO_LOG:-info} .gpu/kernels-parity --nocapture --test-threads 1 ${PARITY_FILTER:-} 2>&1 | tee "$out/parity.txt" || true
HEADS=${HEADS:-12} .gpu/attention8-bench 2>&1 | tee "$out/attention8_bench.jsonl"
