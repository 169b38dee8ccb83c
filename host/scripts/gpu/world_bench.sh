#!/usr/bin/env bash
# World-model rollout speed at real size on the GPU: a random-weight Wan2.1-T2V-1.3B folder
# (make_wan13b.py) turned into a world model (random action embedder, world.json: 3-latent-frame
# chunks, 4 denoise steps, 480x832), rolled out by `fastvideo world`; prints frames/s and the
# first chunk's latency. Run from the repo root on the GPU machine (.gpu/, .whl/ carried).
#   env  MODEL=/tmp/wan13b  CHUNKS=20  WINDOW=21  STEPS="1000,750,500,250"  MAKE_ARGS= (--tiny on a CPU)
#        VARIANTS="vae:;tiny:--tiny-decoder" (NAME:FLAGS for `fastvideo world`, one run each; a random
#        full-size tiny_vae/ is added to the folder for them, speed only; leading VAR=value words
#        are set in the run's environment, host/scripts/gpu/variant.sh)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/wan13b}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
# shellcheck source=host/scripts/gpu/variant.sh
source host/scripts/gpu/variant.sh
# shellcheck disable=SC2086
[ -f "$MODEL/model_index.json" ] || python3 host/scripts/gpu/make_wan13b.py "$MODEL" ${MAKE_ARGS:-}
python3 - "$MODEL" "${WINDOW:-21}" "${STEPS:-1000,750,500,250}" <<'PY'
import json, os, sys
import torch
sys.path.insert(0, "models/training")
from causal_wan import ACTIONS, ActionEmbedder
from safetensors.torch import save_file
model, window, steps = sys.argv[1], int(sys.argv[2]), [float(s) for s in sys.argv[3].split(",")]
cfg = json.load(open(os.path.join(model, "transformer", "config.json")))
dim = cfg["num_attention_heads"] * cfg["attention_head_dim"]
torch.manual_seed(0)
d = os.path.join(model, "action_embedder"); os.makedirs(d, exist_ok=True)
save_file({k: v.contiguous() for k, v in ActionEmbedder(dim).state_dict().items()}, os.path.join(d, "diffusion_pytorch_model.safetensors"))
json.dump({"actions": ACTIONS, "dim": dim}, open(os.path.join(d, "config.json"), "w"))
json.dump({"chunk_frames": 3, "timesteps": steps, "shift": 5.0, "window": window, "sink": 0, "fps": 16,
           "height": 480, "width": 832, "prompt": "a red circle moving left"}, open(os.path.join(model, "world.json"), "w"))
print("world model folder:", model, "dim", dim, "window", window, "steps", steps)
PY
[ -f "$MODEL/tiny_vae/config.json" ] || python3 - "$MODEL/tiny_vae" <<'PY'
import sys
import torch
sys.path.insert(0, "models/training")
from tiny_vae import TinyVideoDecoder
torch.manual_seed(0)
TinyVideoDecoder().half().save(sys.argv[1])  # TAEHV-size channels, random weights: speed only
PY
IFS=';' read -ra variants <<<"${VARIANTS:-vae:}"
for v in "${variants[@]}"; do
  name="${v%%:*}"
  # shellcheck disable=SC2086  # the variant's words
  variant_words ${v#*:}
  run=(env ${VARIANT_ENV[@]+"${VARIANT_ENV[@]}"} "$BIN" world --model "$MODEL" ${VARIANT_FLAGS[@]+"${VARIANT_FLAGS[@]}"})
  "${run[@]}" --actions "none*2" --out /tmp/world_warm.mp4 --json >/dev/null  # warm caches
  "${run[@]}" --actions "right*${CHUNKS:-20}" --out "/tmp/world_$name.mp4" --json \
    >"${OUT:-/tmp}/world_bench_$name.json"
  python3 - "${OUT:-/tmp}/world_bench_$name.json" "$name" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
p50, p95 = o["chunk_seconds_p50"], o["chunk_seconds_p95"]
print(f"{sys.argv[2]}: steady {12 / p50:.1f} frames/s (12 frames per chunk, p50 {p50:.3f} s, p95 {p95:.3f} s); "
      f"first chunk (9 frames) {o['first_chunk_seconds']:.3f} s; whole run {o['frames_per_second']:.1f} frames/s")
PY
done
