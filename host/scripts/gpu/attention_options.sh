#!/usr/bin/env bash
# The 8-bit attention recipes' options on the GPU, run from the repo root on the GPU machine:
# one Q scale per query row (`qrow`), bf16 P·V (`bf16`), V smoothed by its mean (`vmean`) and
# the denominator from the rounded P (`lq`), set by FASTVIDEO_ATTN8_RECIPE (kernels/src/attention8.rs,
# `Recipe`). Figures into $OUT; the
# steps (PARTS, default "parity micro forward"; each part fits one 10-minute call, the default
# three together should: forward is 5-6 minutes with torch.compile):
#   parity        the kernels' 8-bit attention parity test: every recipe and option against SDPA
#                 and its own float32 emulation, per-row scales on query rows of very different
#                 norms, smoothing on values with a per-channel offset;
#   micro         the attention microbenchmark (shipped recipes, then each option), 4K-75K tokens;
#   forward       bench.sh's forward table (RUNS=3): ours bf16, `fast` as shipped, with qrow, and
#                 --int8-attention with qrow and vmean (the two candidates for `fast`), diffusers
#                 eager and torch.compile (SKIP_COMPILE=1 drops it);
#   forward_more  the other options: qrow with bf16 P·V, e4m3 with qrow alone, and with qrow,
#                 vmean and lq (the denominator summed by the tensor cores);
#   psnr          precision_gate.sh: a 20-step 81x480x832 clip in bf16, `fast`, and e4m3 with
#                 qrow,vmean, each one's PSNR against bf16 (the gate's real-size row);
#   world         world_bench.sh with the tiny decoder: bf16 attention, INT8 Q·Kᵀ with qrow, e4m3
#                 with qrow and vmean.
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
    forward | forward_more)
      # Two calls' worth: diffusers and the candidates for `fast`, then the other options.
      R=FASTVIDEO_ATTN8_RECIPE
      if [ "$part" = forward ]; then
        stages="make diffusers ours compare"
        variants="fast:--precision fast;fast_qrow:$R=qrow --precision fast;int8_qrow_vmean:$R=qrow,vmean --int8-attention"
      else
        stages="make ours compare"
        variants="fast_qrow_bf16:$R=qrow,bf16 --precision fast;int8_qrow:$R=qrow --int8-attention;int8_qrow_vmean_lq:$R=qrow,vmean,lq --int8-attention"
      fi
      STAGES="$stages" RUNS="${RUNS:-3}" OUT="$OUT/bench" OURS_VARIANTS="$variants" \
        bash host/scripts/gpu/bench.sh >"$OUT/$part.txt" 2>&1 || rc=1
      tail -16 "$OUT/$part.txt" ;;
    psnr)
      R=FASTVIDEO_ATTN8_RECIPE
      STAGES=make OUT="$OUT/bench" bash host/scripts/gpu/bench.sh >/dev/null 2>&1 || true  # the model folder, once
      OUT="$OUT/psnr" VARIANTS="bf16:--precision bf16;fast:--precision fast;int8_qrow_vmean:$R=qrow,vmean --int8-attention" \
        bash host/scripts/gpu/precision_gate.sh >"$OUT/psnr.txt" 2>&1 || rc=1
      tail -3 "$OUT/psnr.txt"
      rm -rf "$OUT"/psnr/frames_* "$OUT"/psnr/*.mp4 ;;
    world)
      R=FASTVIDEO_ATTN8_RECIPE
      CHUNKS="${CHUNKS:-20}" VARIANTS="tiny:--tiny-decoder;tiny_int8qk_qrow:$R=qrow --tiny-decoder --int8-qk-attention;tiny_int8_qrow_vmean:$R=qrow,vmean --tiny-decoder --int8-attention" \
        bash host/scripts/gpu/world_bench.sh >"$OUT/world.txt" 2>&1 || rc=1
      tail -6 "$OUT/world.txt" ;;
    *) echo "unknown part $part (parity micro forward forward_more psnr world)"; rc=1 ;;
  esac
done
stamp done
exit "$rc"
