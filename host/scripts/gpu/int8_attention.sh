#!/usr/bin/env bash
# One GPU call for 8-bit attention and the world-session options, run from the repo root on the GPU
# machine; figures into $OUT (docs/benchmarks.md, "Precision presets"):
#   1. the kernels' parity binary (all tests; 8-bit attention against SDPA and its emulation) and
#      the attention microbenchmark (TOPS against SDPA at 4K-75K tokens);
#   2. a random-weight Wan2.1-T2V-1.3B folder (make_wan13b.py), then `fastvideo bench` with and
#      without --int8-attention (forward, CFG step, VAE decode at 480x832x81);
#   3. the quality gate's PSNR: one 20-step clip each, bf16 against bf16 + int8 attention
#      (precision_gate.sh);
#   4. world sessions (world_bench.sh): the VAE, the tiny decoder, the tiny decoder + int8 attention.
# Steps 2-4 leave int8 attention out when its parity test failed.
# Carry .gpu-pack/{fastvideo,kernels-parity,attention8-bench,site.tar}.xz (build them here:
# host/scripts/gpu/attention8.sh and the release build's notes in docs/benchmarks.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
MODEL="${MODEL:-/tmp/wan13b}"
mkdir -p "$OUT" .gpu
for f in fastvideo kernels-parity attention8-bench; do
  xz -dc ".gpu-pack/$f.xz" >".gpu/$f" && chmod +x ".gpu/$f"
done
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }

stamp parity
int8=1
.gpu/kernels-parity --nocapture --test-threads 1 >"$OUT/parity.txt" 2>&1 || int8=0
grep -E "attention8|test result" "$OUT/parity.txt"
stamp microbenchmark
.gpu/attention8-bench >"$OUT/attention8_bench.jsonl" 2>&1
cat "$OUT/attention8_bench.jsonl"

stamp model folder
[ -f "$MODEL/model_index.json" ] || python3 host/scripts/gpu/make_wan13b.py "$MODEL" --device cuda >"$OUT/make.txt" 2>&1
variants=("bf16:--precision bf16")
[ "$int8" = 1 ] && variants+=("int8:--precision bf16 --int8-attention")
for v in "${variants[@]}"; do
  stamp "bench ${v%%:*}"
  # shellcheck disable=SC2086
  .gpu/fastvideo bench --model "$MODEL" ${v#*:} --runs "${RUNS:-3}" --vae-runs 1 --json >"$OUT/bench_${v%%:*}.json" \
    2>"$OUT/bench_${v%%:*}.err"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ("forward_s", "cfg_step_s", "vae_decode_s", "precision")})' \
    "$OUT/bench_${v%%:*}.json" || tail -3 "$OUT/bench_${v%%:*}.err"
done

if [ "$int8" = 1 ]; then
  stamp quality gate
  OUT="$OUT/gate" STEPS="${STEPS:-20}" VARIANTS="bf16:--precision bf16;int8:--precision bf16 --int8-attention" \
    FASTVIDEO_BIN=.gpu/fastvideo bash host/scripts/gpu/precision_gate.sh 2>&1 | tail -4
fi

stamp world
wv="vae:;tiny:--tiny-decoder"
[ "$int8" = 1 ] && wv="$wv;tiny_int8:--tiny-decoder --int8-attention"
OUT="$OUT" CHUNKS="${CHUNKS:-12}" VARIANTS="$wv" FASTVIDEO_BIN=.gpu/fastvideo bash host/scripts/gpu/world_bench.sh 2>&1 |
  grep -E "frames/s|rror"
stamp done
