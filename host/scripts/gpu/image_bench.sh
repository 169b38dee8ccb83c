#!/usr/bin/env bash
# The image families at real size with random weights, ours beside diffusers eager and
# torch.compile in one call: FLUX.2-klein-4B (`flux2_bench`: a forward, a guidance step, a whole
# 4-step request, the packing of a mixed stream) or Qwen-Image (`qwenimage_bench`: a forward, a
# true-CFG step, a whole request), then host/scripts/gpu/diffusers_image_bench.py on the same
# shapes. Figures into $OUT.
#   carry .gpu-pack/flux2_bench.xz and .gpu-pack/qwenimage_bench.xz (release builds of
#   `cargo build --release -p fastvideo-flux2 --example flux2_bench` and
#   `-p fastvideo-qwenimage --example qwenimage_bench`, stripped, xz) and .gpu-pack/site.tar.xz
#   (pack_site.sh: diffusers 0.42.1; the machine's transformers builds the text encoders), and
#   .gpu-pack/libfastvideo_graph.so (build_graph_shim.sh: allocator statistics).
#   env  FAMILY=flux2|qwenimage HEIGHT=1024 WIDTH=1024 STEPS=4 RUNS=3 NO_COMPILE= EDIT=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
FAMILY="${FAMILY:-flux2}"
H="${HEIGHT:-1024}" W="${WIDTH:-1024}" RUNS="${RUNS:-3}"
# Any Qwen tokenizer serves (FLUX.2 pads prompts to 512); Qwen-Image's edit needs the picture tags.
case "$FAMILY" in
  flux2) CFG=host/scripts/gpu/flux2_klein_4b; STEPS="${STEPS:-4}"; TOK=tests/fixtures/tiny-qwen3 ;;
  qwenimage) CFG=host/scripts/gpu/qwen_image; STEPS="${STEPS:-10}"; TOK=tests/fixtures/tiny-qwenimage/tokenizer ;;
  *) echo "FAMILY is flux2 or qwenimage" >&2; exit 2 ;;
esac
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
BENCH=".gpu/${FAMILY}_bench"
if [ -f ".gpu-pack/${FAMILY}_bench.xz" ]; then
  mkdir -p .gpu && xz -dc ".gpu-pack/${FAMILY}_bench.xz" >"$BENCH" && chmod +x "$BENCH"
fi
# The fused kernels against the plain ops in float32 on the tiny folder's configs (the same
# function, so float32 rounding apart).
small=/tmp/small_$FAMILY && mkdir -p "$small"
tiny=tests/fixtures/tiny-flux2-klein; [ "$FAMILY" = qwenimage ] && tiny=tests/fixtures/tiny-qwenimage
for part in transformer text_encoder vae; do cp "$tiny/$part/config.json" "$small/$part.json"; done
cp "$tiny/scheduler/scheduler_config.json" "$small/scheduler.json"
small_args=("$small" "$tiny/tokenizer" 64 96 2 1 cuda)
IMAGE_BENCH_DTYPE=f32 IMAGE_BENCH_DUMP=/tmp/small_fused.safetensors FLUX2_BENCH_MIXED=64x64 "$BENCH" "${small_args[@]}" >/dev/null
IMAGE_BENCH_DTYPE=f32 IMAGE_BENCH_DUMP=/tmp/small_plain.safetensors FLUX2_BENCH_MIXED=64x64 FASTVIDEO_NO_KERNELS=1 \
  "$BENCH" "${small_args[@]}" >/dev/null
python3 - /tmp/small_fused.safetensors /tmp/small_plain.safetensors <<'PY' | tee "$OUT/${FAMILY}_kernel_parity_f32.txt"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1])["pred"].double(), load_file(sys.argv[2])["pred"].double()
print(f"float32: fused kernels vs plain ops max abs {(a - b).abs().max():.3e}, rel {(a - b).abs().max() / b.abs().max():.3e}")
PY
# Allocator statistics (peak memory) come through the graph shim beside the binary.
[ -f .gpu-pack/libfastvideo_graph.so ] && cp -p .gpu-pack/libfastvideo_graph.so .gpu/
IMAGE_BENCH_DUMP=/tmp/pred_fused.safetensors "$BENCH" "$CFG" "$TOK" "$H" "$W" "$STEPS" "$RUNS" cuda \
  >"$OUT/${FAMILY}_ours.json"
# The same without our fused kernels (norm and rotation, modulated norms, gated residuals,
# SwiGLU as plain ops): what they are worth, and that they compute the same prediction.
IMAGE_BENCH_DUMP=/tmp/pred_plain.safetensors FASTVIDEO_NO_KERNELS=1 "$BENCH" "$CFG" "$TOK" "$H" "$W" \
  "$STEPS" 1 cuda >"$OUT/${FAMILY}_ours_nokernels.json"
python3 - /tmp/pred_fused.safetensors /tmp/pred_plain.safetensors "$OUT/${FAMILY}_ours_nokernels.json" <<'PY' | tee "$OUT/${FAMILY}_kernel_parity.txt"
import json, sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1])["pred"].double(), load_file(sys.argv[2])["pred"].double()
print(f"fused kernels vs plain ops (bf16): max abs {(a - b).abs().max():.3e}, rel {(a - b).abs().max() / b.abs().max():.3e}")
r = json.load(open(sys.argv[3]))
print(f"without kernels: forward {r['forward_s']*1e3:.1f} ms, CFG step {r['cfg_step_s']*1e3:.1f} ms")
PY
python3 - "$OUT/${FAMILY}_ours.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
gib = (r["peak_allocated_bytes"] or 0) / 2**30
print(f"ours: {r['image_tokens']} image tokens, forward {r['forward_s']*1e3:.1f} ms, CFG step {r['cfg_step_s']*1e3:.1f} ms, "
      f"end to end {r['end_to_end_s']:.3f} s (peak {gib:.1f} GiB); nodes " + ", ".join(f"{n} {s*1e3:.0f} ms" for n, s in r["nodes"]))
print(f"edit with one 1024² picture: {r['edit_s']:.3f} s (peak {(r['edit_peak_allocated_bytes'] or 0) / 2**30:.1f} GiB)")
p = r.get("packing")
if p:
    print(f"mixed stream {p['sizes']}: one at a time {p['one_at_a_time_s']*1e3:.1f} ms, same-size batches "
          f"{p['same_size_batches_s']*1e3:.1f} ms, packed {p['packed_s']*1e3:.1f} ms")
PY
python3 host/scripts/gpu/diffusers_image_bench.py --family "$FAMILY" --height "$H" --width "$W" --steps "$STEPS" \
  --runs "$RUNS" ${NO_COMPILE:+--no-compile} ${EDIT:+--edit} 2>"$OUT/${FAMILY}_diffusers.err" | tee "$OUT/${FAMILY}_diffusers.jsonl"
