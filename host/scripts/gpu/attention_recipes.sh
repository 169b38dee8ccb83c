#!/usr/bin/env bash
# One GPU call comparing the two 8-bit attention recipes, run from the repo root on the GPU
# machine; figures into $OUT (docs/benchmarks.md, "Precision presets"):
#   1. the kernels' 8-bit attention parity test (both recipes against SDPA and their emulations);
#   2. the attention microbenchmark (e4m3 P·V, f16 P·V and SDPA at 4K-75K tokens, head dim 128);
#   3. bench.sh's forward table: ours bf16, --int8-attention, --precision fast (as of 2026-12-04: INT8 Q·Kᵀ, f16 P·V),
#      fast with --fp8-linears, diffusers eager and torch.compile on the same random-weight
#      Wan2.1-1.3B folder and inputs, one call;
#   4. precision_gate.sh: a 20-step 81x480x832 clip in bf16 and in fast, the PSNR between them.
# Carry .gpu-pack/{fastvideo,kernels-parity,attention8-bench,site.tar}.xz (host/scripts/gpu/attention8.sh
# says how to build them).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT" .gpu
for f in kernels-parity attention8-bench; do
  xz -dc ".gpu-pack/$f.xz" >".gpu/$f" && chmod +x ".gpu/$f"
done
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"

stamp parity
.gpu/kernels-parity --nocapture --test-threads 1 cuda_8bit_attention >"$OUT/parity.txt" 2>&1
grep -E "attention8|test result|panicked" "$OUT/parity.txt"
stamp microbenchmark
HEADS=${HEADS:-12} .gpu/attention8-bench >"$OUT/attention8_bench.jsonl" 2>&1
cat "$OUT/attention8_bench.jsonl"
stamp forward
STAGES="make diffusers ours compare" RUNS="${RUNS:-5}" OUT="$OUT/bench" \
  OURS_VARIANTS="int8:--int8-attention;fast:--precision fast;fast_fp8:--precision fast --fp8-linears" \
  bash host/scripts/gpu/bench.sh >"$OUT/bench.txt" 2>&1
tail -14 "$OUT/bench.txt"
stamp psnr
OUT="$OUT/psnr" VARIANTS="bf16:--precision bf16;fast:--precision fast" \
  bash host/scripts/gpu/precision_gate.sh >"$OUT/psnr.txt" 2>&1
tail -3 "$OUT/psnr.txt"
rm -rf "$OUT"/psnr/frames_* "$OUT"/psnr/*.mp4
stamp done
