#!/usr/bin/env bash
# Run on the GPU machine from the repo root: the 8-bit attention kernel's tuning switches
# (kernels/cuda/attention8.cu's header) side by side in one call: for each variant, the
# attention parity tests and the microbenchmark (TOPS against SDPA at 4K-75K tokens). Figures
# into $OUT/<variant>/. Carry .gpu-pack/kernels-parity.xz and .gpu-pack/attention8-bench.xz.
#   env  VARIANTS="base:;poly4:POLY_NUM=4;pp:PINGPONG=1"  (NAME:DEFINES; DEFINES as
#        FASTVIDEO_ATTN8_DEFINES takes them; a variant with TRACE=1 writes per-tile clocks,
#        $OUT/<variant>/trace.<recipe>.u32, read by host/scripts/gpu/attention8_trace.py)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
source host/scripts/gpu/torch_env.sh
out=${OUT:-/tmp/out}
mkdir -p .gpu "$out"
xz -dc .gpu-pack/kernels-parity.xz > .gpu/kernels-parity && chmod +x .gpu/kernels-parity
xz -dc .gpu-pack/attention8-bench.xz > .gpu/attention8-bench && chmod +x .gpu/attention8-bench
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
IFS=';' read -ra variants <<<"${VARIANTS:-base:;poly4:POLY_NUM=4;pp:PINGPONG=1}"
for v in "${variants[@]}"; do
  name="${v%%:*}"
  mkdir -p "$out/$name"
  export FASTVIDEO_ATTN8_DEFINES="${v#*:}"
  echo "== $name ($FASTVIDEO_ATTN8_DEFINES)"
  if [[ ",$FASTVIDEO_ATTN8_DEFINES," == *",TRACE=1,"* ]]; then  # per-tile clocks, not timed
    ATTN8_TRACE="$out/$name/trace" HEADS=${HEADS:-12} .gpu/attention8-bench && ls "$out/$name"
    continue
  fi
  .gpu/kernels-parity --nocapture --test-threads 1 8bit >"$out/$name/parity.txt" 2>&1
  grep -E "^test |test result|relative" "$out/$name/parity.txt" | head -12
  HEADS=${HEADS:-12} .gpu/attention8-bench 2>&1 | tee "$out/$name/bench.jsonl"
done
