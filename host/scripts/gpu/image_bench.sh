#!/usr/bin/env bash
# The image families at real size with random weights, ours beside diffusers eager and
# torch.compile in one call: FLUX.2-klein-4B (`flux2_bench`: a forward, a guidance step, a whole
# 4-step request, the packing of a mixed stream) or Qwen-Image (`qwenimage_bench`: a forward, a
# true-CFG step, a whole request), then host/scripts/gpu/diffusers_image_bench.py on the same
# shapes. Figures into $OUT.
#   carry .gpu-pack/flux2_bench.xz and .gpu-pack/qwenimage_bench.xz (release builds of
#   `cargo build --release -p fastvideo-flux2 --example flux2_bench` and
#   `-p fastvideo-qwenimage --example qwenimage_bench`, stripped, xz) and .gpu-pack/site.tar.xz
#   (pack_site.sh: diffusers 0.42.1; the machine's transformers builds the text encoders).
#   env  FAMILY=flux2|qwenimage HEIGHT=1024 WIDTH=1024 STEPS=4 RUNS=3 NO_COMPILE= EDIT=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
FAMILY="${FAMILY:-flux2}"
H="${HEIGHT:-1024}" W="${WIDTH:-1024}" RUNS="${RUNS:-3}"
case "$FAMILY" in
  flux2) CFG=host/scripts/gpu/flux2_klein_4b; STEPS="${STEPS:-4}" ;;
  qwenimage) CFG=host/scripts/gpu/qwen_image; STEPS="${STEPS:-10}" ;;
  *) echo "FAMILY is flux2 or qwenimage" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
BENCH=".gpu/${FAMILY}_bench"
if [ -f ".gpu-pack/${FAMILY}_bench.xz" ]; then
  mkdir -p .gpu && xz -dc ".gpu-pack/${FAMILY}_bench.xz" >"$BENCH" && chmod +x "$BENCH"
fi
"$BENCH" "$CFG" tests/fixtures/tiny-qwen3 "$H" "$W" "$STEPS" "$RUNS" cuda >"$OUT/${FAMILY}_ours.json"
python3 - "$OUT/${FAMILY}_ours.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
gib = (r["peak_allocated_bytes"] or 0) / 2**30
print(f"ours: {r['image_tokens']} image tokens, forward {r['forward_s']*1e3:.1f} ms, CFG step {r['cfg_step_s']*1e3:.1f} ms, "
      f"end to end {r['end_to_end_s']:.3f} s (peak {gib:.1f} GiB); nodes " + ", ".join(f"{n} {s*1e3:.0f} ms" for n, s in r["nodes"]))
p = r.get("packing")
if p:
    print(f"mixed stream {p['sizes']}: one at a time {p['one_at_a_time_s']*1e3:.1f} ms, same-size batches "
          f"{p['same_size_batches_s']*1e3:.1f} ms, packed {p['packed_s']*1e3:.1f} ms")
PY
python3 host/scripts/gpu/diffusers_image_bench.py --family "$FAMILY" --height "$H" --width "$W" --steps "$STEPS" \
  --runs "$RUNS" ${NO_COMPILE:+--no-compile} ${EDIT:+--edit} 2>"$OUT/${FAMILY}_diffusers.err" | tee "$OUT/${FAMILY}_diffusers.jsonl"
