#!/usr/bin/env bash
# shellcheck disable=SC2329  # the stage functions are called through stage()
# The image-to-video GPU benchmark, run from the repo root on the GPU machine: our binary vs
# diffusers (eager and torch.compile) on one random-weight Wan2.1-I2V-14B-480P folder, same
# weights and inputs, in one call: per-forward and per-CFG-step time, CLIP and VAE-encode cost,
# peak memory, and our velocity's error against diffusers' bf16 one. Ours runs before diffusers
# (whose torch.compile phase is the longest), and diffusers writes its figures after each phase,
# so a call cut by its time limit still compares what ran. The whole run fits one 10-minute call
# with RUNS=2 (the machine goes back between calls, and with it the 33 GB folder).
#   needs  .whl/ and the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo} (host/scripts/gpu/build_here.sh)
#   env    STAGES="make inputs ours diffusers compare"  OUT=/tmp/i2v  MODEL=/tmp/wani2v  RUNS=2
#          FRAMES=81 HEIGHT=480 WIDTH=832 DEVICE=cuda MAKE_ARGS= (--tiny --device cpu: a CPU check)
#          SKIP_COMPILE=1
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
STAGES="${STAGES:-make inputs ours diffusers compare}"
OUT="${OUT:-/tmp/i2v}"
MODEL="${MODEL:-/tmp/wani2v}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
RUNS="${RUNS:-2}"
DEVICE="${DEVICE:-cuda}"
SIZE=(--frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}")
S=host/scripts/gpu
mkdir -p "$OUT"

# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh

# shellcheck source=host/scripts/gpu/stage.sh
source host/scripts/gpu/stage.sh

make_model() {
  if [ -f "$MODEL/model_index.json" ]; then echo "$MODEL exists"; return; fi
  # shellcheck disable=SC2086  # MAKE_ARGS holds flags
  python3 "$S/make_wan_i2v.py" "$MODEL" --device "$DEVICE" ${MAKE_ARGS:-}
}

inputs() {
  python3 "$S/diffusers_i2v_bench.py" --model "$MODEL" --out "$OUT" --device "$DEVICE" "${SIZE[@]}" --inputs-only
}

diffusers() {
  python3 "$S/diffusers_i2v_bench.py" --model "$MODEL" --out "$OUT" --device "$DEVICE" "${SIZE[@]}" \
    --runs "$RUNS" ${SKIP_COMPILE:+--skip-compile}
}

ours() { # bench's JSON, with the GPU's peak as nvidia-smi saw it (every process) merged in
  local smi="$OUT/ours_smi.txt" pid= rc=0
  : >"$smi"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${GPU_INDEX:-0}" -lms 200 >"$smi" &
    pid=$!
  fi
  "$BIN" bench --model "$MODEL" --device "$DEVICE" --dtype bf16 "${SIZE[@]}" --runs "$RUNS" --vae-runs 1 \
    --inputs "$OUT/inputs.safetensors" --outputs "$OUT/ours_velocity.safetensors" --json >"$OUT/ours.json" || rc=$?
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  python3 -c 'import json, sys
p, smi = sys.argv[1:]
mib = [int(x) for x in open(smi).read().split() if x.isdigit()]
o = json.load(open(p))
o["peak_gpu_smi_mib"], o["base_gpu_smi_mib"] = (max(mib), mib[0]) if mib else (None, None)
json.dump(o, open(p, "w"))' "$OUT/ours.json" "$smi"
  return "$rc"
}

compare() { # one table: ours beside diffusers eager and compiled, and the velocity error
  python3 - "$OUT" <<'PY'
import json, os, sys
from safetensors.torch import load_file
out = sys.argv[1]
d = json.load(open(os.path.join(out, "diffusers_i2v.json")))
d.setdefault("gpu", "?")
o = json.load(open(os.path.join(out, "ours.json")))
a = load_file(os.path.join(out, "ours_velocity.safetensors"))["velocity"].float()
b = load_file(os.path.join(out, "ref_bf16.safetensors"))["velocity"].float()
rel = ((a - b).norm() / b.norm()).item()
gib = lambda x: f"{x / 2**30:.1f} GiB" if x else "-"
f = lambda x: f"{x:.3f}" if isinstance(x, (int, float)) else "-"
print(f"{d['gpu']}, {d['frames']}x{d['height']}x{d['width']}, {o['tokens']} tokens, bf16")
print("| | forward s | CFG step s | peak |")
print("|---|---|---|---|")
print(f"| diffusers eager | {f(d['bf16_eager_forward_s'])} | {f(d['bf16_eager_cfg_step_s'])} | {gib(d['bf16_eager_forward_peak_bytes'])} |")
if "bf16_compile_forward_s" in d:
    print(f"| diffusers + torch.compile | {f(d['bf16_compile_forward_s'])} | {f(d['bf16_compile_cfg_step_s'])} | {gib(d['bf16_compile_forward_peak_bytes'])} |")
smi = o.get("peak_gpu_smi_mib")
print(f"| fastvideo | {f(o['forward_s'])} | {f(o['cfg_step_s'])} | {f'{smi / 1024:.1f} GiB (nvidia-smi)' if smi else '-'} |")
print(f"CLIP encode: diffusers fp32 {f(d['image_encode_s'])} s, fastvideo fp32 {f(o['image_encode_s'])} s")
print(f"VAE encode of the condition video: diffusers fp32 {f(d['vae_encode_fp32_s'])} s, bf16 {f(d['vae_encode_bf16_s'])} s; "
      f"fastvideo ({o['vae_dtype']}) {f(o['vae_encode_s'])} s")
print(f"velocity: relative L2 error ours vs diffusers bf16 eager {rel:.3e}")
PY
}

stage make make_model
stage inputs inputs
stage ours ours || true
stage diffusers diffusers || true
stage compare compare
