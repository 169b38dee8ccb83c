#!/usr/bin/env bash
# shellcheck disable=SC2329  # the stage functions are called through stage()
# Issue 58, "fit the card": a 14B image-to-video job inside a 24 GiB device budget
# (--max-device-memory 24G, which also caps libtorch's allocator there) against the same job with
# every weight resident, on one GPU in one call, same folder and inputs:
#   make     a random-weight Wan2.1-I2V-14B-480P folder with umt5-xxl's whole text encoder
#            (make_wan_i2v.py --full-text-encoder: 47 GB, what the published folder holds)
#   bench    `fastvideo bench` both ways: forward, CFG step, text encode, VAE decode, and each
#            phase's allocator peak (RUNS timed runs after a warm-up)
#   clip     `fastvideo generate` both ways end to end, the 4-step distilled recipe (the list
#            1000,750,500,250 at shift 5, guidance 1, the dmd sampler; LightX2V's) at 480x832x81
#            from a picture to the MP4: wall time, per-step time, the allocator's peak
# The weights are random, so the clip is noise: this measures time and memory, not quality.
# Run from the repo root on the GPU machine with the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo}
# (or .gpu-pack/fastvideo.xz) and the CUDA-graph library in .gpu-pack (the budget's cap needs it).
#   env  STAGES="make bench clip"  MODEL=/tmp/wan-i2v-14b-full  BUDGET=24G  RUNS=2  OUT=/tmp/offload
#        FULL_TEXT_ENCODER=1 (unset: the 2-layer text encoder, a faster build that leaves the
#        budget to the transformer, the image encoder and the VAE)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
# shellcheck source=host/scripts/gpu/stage.sh
source host/scripts/gpu/stage.sh
STAGES="${STAGES:-make bench clip}"
FULL_TEXT_ENCODER="${FULL_TEXT_ENCODER-1}"
MODEL="${MODEL:-/tmp/wan-i2v-14b-full}"
BUDGET="${BUDGET:-24G}"
OUT="${OUT:-/tmp/offload}"
SIZE=(--frames 81 --height 480 --width 832)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

make_model() {
  if [ -f "$MODEL/model_index.json" ]; then echo "$MODEL exists"; return; fi
  # shellcheck disable=SC2086  # the flag or nothing
  python3 host/scripts/gpu/make_wan_i2v.py "$MODEL" --device cuda ${FULL_TEXT_ENCODER:+--full-text-encoder}
}

bench() { # $1: label, then extra flags
  local label=$1
  shift
  "$BIN" bench --model "$MODEL" --device cuda --dtype bf16 "${SIZE[@]}" --runs "${RUNS:-2}" --vae-runs 1 --json "$@" \
    >"$OUT/bench_$label.json" 2>"$OUT/bench_$label.log" || { tail -5 "$OUT/bench_$label.log"; return 1; }
  python3 - "$OUT/bench_$label.json" "$label" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
peak = max((m.get("peak_reserved_bytes") or 0) for m in r["phase_memory"]) / 2**30
alloc = max((m.get("peak_allocated_bytes") or 0) for m in r["phase_memory"]) / 2**30
print(f"{sys.argv[2]}: forward {r['forward_s']:.3f} s, CFG step {r['cfg_step_s']:.3f} s, text encode "
      f"{r['text_encode_s']:.3f} s, VAE decode {r['vae_decode_s']:.3f} s, load {r['load_s']:.1f} s, "
      f"peak allocated {alloc:.2f} GiB, peak reserved {peak:.2f} GiB ({r['memory_view']}); {r.get('device_budget')}")
for m in r["phase_memory"]:
    print(f"  {m['phase']}: {(m.get('peak_allocated_bytes') or 0) / 2**30:.2f} GiB allocated, "
          f"{(m.get('peak_reserved_bytes') or 0) / 2**30:.2f} GiB reserved")
PY
}

clip() { # $1: label, then extra flags
  local label=$1
  shift
  /usr/bin/time -f "wall %e s, peak host RSS %M KiB" "$BIN" generate --device cuda --model "$MODEL" "${SIZE[@]}" \
    --image tests/fixtures/i2v_first_frame.png --prompt "a cat walks across a sunny garden" \
    --timesteps 1000,750,500,250 --shift 5 --guidance 1 --sampler dmd --seed 1 --out "$OUT/$label.mp4" "$@" \
    2>&1 | grep -E "^(model|memory|wrote|device memory|wall)|rror" || true
}

stage make make_model
stage clip clip budget --max-device-memory "$BUDGET" || true
stage clip clip resident || true
stage bench bench resident || true
stage bench bench budget --max-device-memory "$BUDGET" || true
