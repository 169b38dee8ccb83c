#!/usr/bin/env bash
# Issue 57: the LTX-2 audio-video transformer at the published size (Lightricks/LTX-2's
# transformer config, ltx2_transformer_config.json; random weights) and a published shape,
# in one call: `fastvideo bench-ltx2` (a forward, a step with the pipeline's default guidance:
# cond+uncond batched, the STG pass, the modality pass; peak memory), then diffusers'
# LTX2VideoTransformer3DModel eager and with regional torch.compile on the same shapes
# (diffusers_ltx2_bench.py). Then sglang's reference shape (256x256, 9 frames). Figures into $OUT.
# Carry .gpu-pack/fastvideo.xz (build_here.sh), .gpu-pack/site.tar.xz (fetch_wheels.sh,
# pack_site.sh: diffusers 0.42.1) and .gpu-pack/libfastvideo_graph.so (build_graph_shim.sh).
#   env  FRAMES=121 HEIGHT=512 WIDTH=768 RUNS=3 NO_COMPILE=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
CFG=host/scripts/gpu/ltx2_transformer_config.json
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for shape in "${FRAMES:-121} ${HEIGHT:-512} ${WIDTH:-768}" "9 256 256"; do
  read -r f h w <<<"$shape"
  tag="${f}x${h}x${w}"
  args=(--frames "$f" --height "$h" --width "$w" --runs "${RUNS:-3}")
  "$BIN" bench-ltx2 --config "$CFG" "${args[@]}" --device cuda --dtype bf16 >"$OUT/ours_$tag.json"
  python3 host/scripts/gpu/diffusers_ltx2_bench.py "$CFG" "${args[@]}" ${NO_COMPILE:+--no-compile} \
    2>"$OUT/diffusers_$tag.err" | tee "$OUT/diffusers_$tag.txt"
  python3 - "$OUT/ours_$tag.json" "$OUT/diffusers_$tag.txt" "$tag" <<'PY'
import json, sys
ours = json.load(open(sys.argv[1]))
theirs = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
print(f"{sys.argv[3]}: {ours['video_tokens']} video + {ours['audio_tokens']} audio tokens")
print(f"  ours:     forward {ours['forward_s']*1e3:.1f} ms, step {ours['step_s']*1e3:.1f} ms, "
      f"peak {(ours['peak_allocated_bytes'] or 0)/2**30:.1f} GiB")
for t in theirs:
    print(f"  diffusers {t['mode']}: forward {t['forward_s']*1e3:.1f} ms, step {t['step_s']*1e3:.1f} ms "
          f"({t['step_s']/ours['step_s']:.2f}x ours), peak {(t['peak_allocated_bytes'] or 0)/2**30:.1f} GiB")
PY
done
