#!/usr/bin/env bash
# The 8-bit attention recipes and their options on the GPU, run from the repo root on the GPU
# machine. The shipped recipes (kernels/src/attention8/mod.rs, `Recipe::shipped`) are e4m3 P·V with
# one Q scale per row and V smoothed (`--int8-attention`, what `fast` runs on generation models)
# and f16 P·V with one Q scale per row (`--int8-qk-attention`, world models); the research switch
# FASTVIDEO_ATTN8_RECIPE=<options> runs a recipe with exactly the options listed instead (`qrow`,
# `bf16`, `vmean`; `none`). Figures into $OUT; the steps (PARTS, default "parity micro forward";
# each part fits one 10-minute call, the default three together should: forward is 5-6 minutes
# with torch.compile):
#   parity        the kernels' 8-bit attention parity test: every recipe and option against SDPA
#                 and its own float32 emulation, per-row scales on query rows of very different
#                 norms, smoothing on values with a per-channel offset;
#   micro         the attention microbenchmark (shipped recipes, then each option), 4K-75K tokens;
#   forward       bench.sh's forward table (RUNS=3): ours bf16, `fast`, `fast` with the kernel's
#                 options off (what they cost), --int8-qk-attention, diffusers eager and
#                 torch.compile (SKIP_COMPILE=1 drops it);
#   shipped       ours bf16 and `fast` beside diffusers eager only (a quick check of a new binary);
#   forward_more  the other options (beside diffusers eager): bf16 P·V with qrow, e4m3 with qrow alone;
#   psnr          precision_gate.sh: a 20-step 81x480x832 clip in bf16, `fast` and
#                 --int8-qk-attention, each one's PSNR against bf16 (the gate's real-size row);
#   world         world_bench.sh: the tiny decoder with bf16 attention, `fast` (the world gate's
#                 recipe and the tiny decoder), the tiny decoder with --int8-attention.
# Carry .gpu-pack/{fastvideo,kernels-parity,attention8-bench,site.tar}.xz (host/scripts/gpu/attention8.sh
# says how to build them).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
PARTS="${PARTS:-parity micro forward}"
mkdir -p "$OUT" .gpu
for f in kernels-parity attention8-bench; do
  # a warm machine keeps .gpu/ from an earlier call: unpack unless it is newer than the pack
  { [ ! -x ".gpu/$f" ] || [ ".gpu-pack/$f.xz" -nt ".gpu/$f" ]; } && xz -dc ".gpu-pack/$f.xz" >".gpu/$f" && chmod +x ".gpu/$f"
done
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
for part in $PARTS; do
  stamp "$part"
  case "$part" in
    parity)
      .gpu/kernels-parity --nocapture --test-threads 1 cuda_8bit_attention >"$OUT/parity.txt" 2>&1 || rc=1
      grep -E "attention8|test result|panicked" "$OUT/parity.txt" ;;
    micro)
      HEADS=${HEADS:-12} .gpu/attention8-bench >"$OUT/attention8_bench.jsonl" 2>&1 || rc=1
      cat "$OUT/attention8_bench.jsonl" ;;
    forward | shipped | forward_more)
      R=FASTVIDEO_ATTN8_RECIPE
      skip="${SKIP_COMPILE:-}"
      case "$part" in
        forward)
          stages="make diffusers ours compare"
          variants="fast:--precision fast;fast_plain:$R=none --precision fast;int8_qk:--int8-qk-attention" ;;
        shipped) stages="make diffusers ours"; variants="fast:--precision fast"; skip=1 ;;  # diffusers writes the inputs
        *) stages="make diffusers ours"; variants="int8_qk_bf16:$R=qrow,bf16 --int8-qk-attention;int8_qrow:$R=qrow --int8-attention"; skip=1 ;;
      esac
      rm -f "$OUT"/bench/ours*.json  # this part's runs only, below
      STAGES="$stages" RUNS="${RUNS:-3}" OUT="$OUT/bench" OURS_VARIANTS="$variants" SKIP_COMPILE="$skip" \
        bash host/scripts/gpu/bench.sh >"$OUT/$part.txt" 2>&1 || rc=1
      tail -16 "$OUT/$part.txt"
      for f in "$OUT"/bench/ours*.json; do  # what each run took: the preset's options, per forward
        [ -f "$f" ] || continue
        python3 -c 'import json, sys; o = json.load(open(sys.argv[1])); print(sys.argv[1], o["lossy_paths"], o["forward_s"])' "$f"
      done ;;
    psnr)
      STAGES=make OUT="$OUT/bench" bash host/scripts/gpu/bench.sh >/dev/null 2>&1 || true  # the model folder, once
      OUT="$OUT/psnr" VARIANTS="bf16:--precision bf16;fast:--precision fast;int8_qk:--int8-qk-attention" \
        bash host/scripts/gpu/precision_gate.sh >"$OUT/psnr.txt" 2>&1 || rc=1
      tail -4 "$OUT/psnr.txt"
      rm -rf "$OUT"/psnr/frames_* "$OUT"/psnr/*.mp4 ;;
    world)
      CHUNKS="${CHUNKS:-20}" VARIANTS="tiny:--tiny-decoder;fast:--precision fast;tiny_int8:--tiny-decoder --int8-attention" \
        bash host/scripts/gpu/world_bench.sh >"$OUT/world.txt" 2>&1 || rc=1
      tail -6 "$OUT/world.txt" ;;
    *) echo "unknown part $part (parity micro forward shipped forward_more psnr world)"; rc=1 ;;
  esac
done
stamp done
exit "$rc"
