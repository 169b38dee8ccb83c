#!/usr/bin/env bash
# Cosmos3-Nano at a published shape with random weights, one call: `fastvideo bench-cosmos3`
# (the prompt's pass, a forward, a CFG step with and without the prefix cache, memory, the
# reasoner's decode on the same weights), then diffusers' Cosmos3OmniTransformer eager and with
# regional torch.compile on the same shapes. Figures into $OUT. Carry .gpu-pack/cosmos3_bench.xz
# (the bench alone: `cargo build --release -p fastvideo-cosmos3 --example cosmos3_bench`, stripped,
# xz; the full CLI's `fastvideo bench-cosmos3` is the same code) and .gpu-pack/site.tar.xz
# (fetch_wheels.sh, pack_site.sh; diffusers 0.42.1), and .gpu-pack/libfastvideo_graph.so
# (build_graph_shim.sh: CUDA graphs for the reasoner's decode, allocator statistics).
#   env  FRAMES=61 HEIGHT=720 WIDTH=1280 RUNS=3 NO_COMPILE=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
CFG=host/scripts/gpu/cosmos3_nano_config.json
shape=(--frames "${FRAMES:-61}" --height "${HEIGHT:-720}" --width "${WIDTH:-1280}" --runs "${RUNS:-3}")
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
BENCH=.gpu/cosmos3_bench
if [ -f .gpu-pack/cosmos3_bench.xz ]; then
  mkdir -p .gpu && xz -dc .gpu-pack/cosmos3_bench.xz >"$BENCH" && chmod +x "$BENCH"
fi
# The fused kernels against the plain ops in float32, on a small model with the real head size:
# they compute the same function, so the predictions agree to float32 rounding.
small=(host/scripts/gpu/cosmos3_small_config.json 17 256 256 1)
COSMOS3_BENCH_DTYPE=f32 COSMOS3_BENCH_DUMP=/tmp/small_fused.safetensors "$BENCH" "${small[@]}" 0 cuda >/dev/null
COSMOS3_BENCH_DTYPE=f32 COSMOS3_BENCH_DUMP=/tmp/small_plain.safetensors FASTVIDEO_NO_KERNELS=1 "$BENCH" "${small[@]}" 0 cuda >/dev/null
python3 - /tmp/small_fused.safetensors /tmp/small_plain.safetensors <<'PY' | tee "$OUT/kernel_parity_f32.txt"
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
for k in a:
    x, y = a[k].double(), b[k].double()
    print(f"float32 {k}: fused kernels vs plain ops max abs {(x - y).abs().max():.3e}, rel {(x - y).abs().max() / y.abs().max():.3e}")
PY
args=("$CFG" "${FRAMES:-61}" "${HEIGHT:-720}" "${WIDTH:-1280}" "${RUNS:-3}")
COSMOS3_BENCH_DUMP=/tmp/pred_fused.safetensors "$BENCH" "${args[@]}" 32 cuda >"$OUT/ours.json"
# The same without our fused kernels (per-head norm and rotation as plain ops) and with keys and
# values repeated over their groups instead of SDPA's grouped path: what each is worth, and that
# the fused path computes the same predictions.
COSMOS3_BENCH_DUMP=/tmp/pred_plain.safetensors FASTVIDEO_NO_KERNELS=1 "$BENCH" "${args[@]}" 0 cuda >"$OUT/ours_nokernels.json"
[ -n "${GQA_REPEAT:-}" ] && FASTVIDEO_COSMOS3_GQA=repeat "$BENCH" "${args[@]}" 0 cuda >"$OUT/ours_gqa_repeat.json"
python3 - /tmp/pred_fused.safetensors /tmp/pred_plain.safetensors "$OUT" <<'PY' | tee "$OUT/kernel_parity.txt"
import json, sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
for k in a:
    x, y = a[k].double(), b[k].double()
    print(f"{k}: fused vs plain ops max abs {(x - y).abs().max():.3e}, rel {(x - y).abs().max() / y.abs().max():.3e}")
import os
for name in ("ours_nokernels", "ours_gqa_repeat"):
    if not os.path.exists(f"{sys.argv[3]}/{name}.json"):
        continue
    r = json.load(open(f"{sys.argv[3]}/{name}.json"))
    print(f"{name}: forward {r['forward_s']*1e3:.1f} ms, CFG step {r['step_cached_s']*1e3:.1f} ms")
PY
python3 - "$OUT/ours.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"ours: {r['gen_tokens']} tokens/branch, prefix {r['prefix_s']*1e3:.1f} ms, forward {r['forward_s']*1e3:.1f} ms, "
      f"CFG step {r['step_cached_s']*1e3:.1f} ms cached / {r['step_uncached_s']*1e3:.1f} ms uncached, "
      f"peak {(r['peak_allocated_bytes'] or 0)/2**30:.1f} GiB")
if r.get("reasoner"):
    d = r["reasoner"]["decode"]
    print("reasoner: ttft {:.1f} ms; ".format(r["reasoner"]["ttft_s"]*1e3) + ", ".join(f"B={x['batch']} {x['tokens_per_s']:.0f} tok/s" for x in d))
PY
python3 host/scripts/gpu/diffusers_cosmos3_bench.py "$CFG" "${shape[@]}" ${NO_COMPILE:+--no-compile} \
  2>"$OUT/diffusers.err" | tee "$OUT/diffusers.txt"
