#!/usr/bin/env bash
# Language-model speed on the GPU, one call: a random-weight Qwen3-1.7B folder (make_qwen.py),
# then `fastvideo bench-lm` (CUDA graphs on and off) and transformers' generate (eager, and static cache + torch.compile)
# on the same folder and token ids. Figures into $OUT. Carry .gpu-pack/fastvideo.xz,
# .gpu-pack/libfastvideo_graph.so (build_graph_shim.sh) and the wheels (.gpu-pack/site.tar.xz) for transformers.
#   env  MODEL=/tmp/qwen17b  BATCHES=1,8,32,128  STEPS=32  NO_COMPILE=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/qwen17b}"
OUT="${OUT:-/tmp/out}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
[ -f "$MODEL/config.json" ] || python3 host/scripts/gpu/make_qwen.py "$MODEL" >"$OUT/make.txt" 2>&1
"$BIN" bench-lm --lm "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" --json | tee "$OUT/ours.json"
# The same without CUDA graphs (each decode step's launches issued from the host): the
# greedy tokens must be the same.
FASTVIDEO_NO_GRAPHS=1 "$BIN" bench-lm --lm "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" --json \
  >"$OUT/ours_eager.json"
python3 - "$OUT/ours.json" "$OUT/ours_eager.json" <<'PY' | tee "$OUT/graph_parity.txt"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for x, y in zip(a["decode"], b["decode"]):
    same = x["first_tokens"] == y["first_tokens"]
    n = next((i for i, (s, t) in enumerate(zip(x["first_tokens"], y["first_tokens"])) if s != t), len(x["first_tokens"]))
    print(f"B={x['batch']}: graphs {x['tokens_per_s']:.0f} tok/s, eager {y['tokens_per_s']:.0f} tok/s, "
          f"first request's tokens {'identical' if same else f'differ from token {n}'} ({len(x['first_tokens'])})")
PY
# The same with the paged decode kernel off (pages gathered, then SDPA).
FASTVIDEO_NO_KERNELS=1 "$BIN" bench-lm --lm "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" --json \
  >"$OUT/ours_gathered.json"
# Every line kept (eager's figures survive a compile that runs out of time).
python3 host/scripts/gpu/transformers_lm_bench.py "$MODEL" --batches "${BATCHES:-1,8,32,128}" --steps "${STEPS:-32}" \
  ${NO_COMPILE:+--no-compile} 2>"$OUT/transformers.err" | tee "$OUT/transformers.txt"
