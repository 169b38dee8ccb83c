#!/usr/bin/env bash
# shellcheck disable=SC2329  # the stage functions are called through stage()
# The Wan 2.2 GPU benchmark, run from the repo root on the GPU machine: our binary vs diffusers
# (eager and torch.compile) on one random-weight folder of make_wan22.py, same weights and inputs,
# in one call. KIND=a14b (T2V-A14B, two 14B experts): per-forward and per-CFG-step time, the
# low-noise expert's forward, the experts alternating (per forward), peak memory with both
# experts resident. KIND=ti2v (TI2V-5B): forward and CFG step, and the Wan 2.2 VAE's decode (time
# and memory). Both: our velocity's error against diffusers' bf16 one (expert 0). Ours runs
# before diffusers (whose torch.compile phase is the longest), and diffusers writes its figures
# after each phase, so a call cut by its time limit still compares what ran. The a14b folder is
# 28 GB (transformer_2/ links to transformer/'s weights: same values, two copies when loaded).
#   needs  .gpu-pack/site.tar.xz or .whl/ (pack_site.sh, fetch_wheels.sh) and the binary at
#          ${FASTVIDEO_BIN:-.gpu/fastvideo}, or .gpu-pack/fastvideo.xz (xz of the stripped release build)
#   env    KIND=a14b|ti2v  STAGES="make inputs ours diffusers compare" (a14b: add `offload`, our
#          bench with --offload-experts)  MODEL=/tmp/wan22-$KIND
#          OUT=/tmp/wan22-$KIND-out  RUNS=2  DEVICE=cuda  SKIP_COMPILE=1
#          FRAMES/HEIGHT/WIDTH (a14b 81x480x832, ti2v 121x704x1280)
#          MAKE_ARGS= (--tiny with DEVICE=cpu: a CPU check)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
KIND="${KIND:-a14b}"
case "$KIND" in
  a14b) SIZE=(--frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}") ;;
  ti2v) SIZE=(--frames "${FRAMES:-121}" --height "${HEIGHT:-704}" --width "${WIDTH:-1280}") ;;
  *) echo "KIND=$KIND: a14b or ti2v" >&2; exit 2 ;;
esac
STAGES="${STAGES:-make inputs ours diffusers compare}"
OUT="${OUT:-/tmp/wan22-$KIND-out}"
MODEL="${MODEL:-/tmp/wan22-$KIND}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
RUNS="${RUNS:-2}"
DEVICE="${DEVICE:-cuda}"
S=host/scripts/gpu
mkdir -p "$OUT"
# torch_env.sh unpacks the binary too (it travels compressed: the 64 MiB a call carries).
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh

# shellcheck source=host/scripts/gpu/stage.sh
source host/scripts/gpu/stage.sh

make_model() {
  if [ -f "$MODEL/model_index.json" ]; then echo "$MODEL exists"; return; fi
  # shellcheck disable=SC2086  # MAKE_ARGS holds flags
  python3 "$S/make_wan22.py" "$MODEL" --kind "$KIND" --device "$DEVICE" ${MAKE_ARGS:-}
}

inputs() {
  python3 "$S/diffusers_wan22_bench.py" --model "$MODEL" --kind "$KIND" --out "$OUT" --device "$DEVICE" "${SIZE[@]}" \
    --inputs-only
}

diffusers() {
  python3 "$S/diffusers_wan22_bench.py" --model "$MODEL" --kind "$KIND" --out "$OUT" --device "$DEVICE" "${SIZE[@]}" \
    --runs "$RUNS" ${SKIP_COMPILE:+--skip-compile}
}

ours() { ours_as ours --runs "$RUNS"; }

# a14b with --offload-experts: one run per measurement is enough for the swap time and memory.
offload() { ours_as ours_offload --runs 1 --offload-experts; }

ours_as() { # NAME ARGS...: bench's JSON in NAME.json, with the GPU's peak as nvidia-smi saw it merged in
  local name=$1 smi="$OUT/$1_smi.txt" pid='' rc=0
  shift
  : >"$smi"
  rm -f "$OUT/ours_velocity.safetensors"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${GPU_INDEX:-0}" -lms 200 >"$smi" &
    pid=$!
  fi
  # Seeded inputs when the inputs stage did not run (a call measuring our side alone).
  local inputs=()
  [ -f "$OUT/inputs.safetensors" ] && inputs=(--inputs "$OUT/inputs.safetensors")
  "$BIN" bench --model "$MODEL" --device "$DEVICE" --dtype bf16 "${SIZE[@]}" "$@" --vae-runs 1 \
    "${inputs[@]}" --outputs "$OUT/ours_velocity.safetensors" --json >"$OUT/$name.json" || rc=$?
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  [ -s "$OUT/$name.json" ] || return "$((rc ? rc : 1))"
  python3 -c 'import json, sys
p, smi = sys.argv[1:]
mib = [int(x) for x in open(smi).read().split() if x.isdigit()]
o = json.load(open(p))
o["peak_gpu_smi_mib"], o["base_gpu_smi_mib"] = (max(mib), mib[0]) if mib else (None, None)
json.dump(o, open(p, "w"))' "$OUT/$name.json" "$smi"
  return "$rc"
}

compare() { # one table for the kind: ours beside diffusers eager and compiled, and the velocity error
  FRAMES_HW="${SIZE[1]}x${SIZE[3]}x${SIZE[5]}" python3 - "$OUT" "$KIND" <<'PY'
import json, os, sys
from safetensors.torch import load_file
out, kind = sys.argv[1:]
def read(name):  # {} for a side that did not run (or was cut before writing)
    try:
        return json.load(open(os.path.join(out, name)))
    except (OSError, ValueError):
        return {}
d, o = read("diffusers_wan22.json"), read("ours.json")
gib = lambda x: f"{x / 2**30:.1f} GiB" if x else "-"
f = lambda x: f"{x:.3f}" if isinstance(x, (int, float)) else "-"
row = lambda *cells: print("| " + " | ".join(cells) + " |")
def mem(*parts):  # "X GiB what, ..." for the figures there are (none on a CPU)
    return ", ".join(f"{gib(b)} {what}" for b, what in parts if b) or "-"
smi = o.get("peak_gpu_smi_mib")
ours_peak = (smi * 2**20 if smi else None, "peak (nvidia-smi)")
print(f"{d.get('gpu', '?')}, {kind}, {os.environ.get('FRAMES_HW')}, {o.get('tokens', '?')} tokens, bf16")
eager = [f(d.get("bf16_eager_forward_s")), f(d.get("bf16_eager_cfg_step_s"))]
comp = [f(d.get("bf16_compile_forward_s")), f(d.get("bf16_compile_cfg_step_s"))]
mine = [f(o.get("forward_s")), f(o.get("cfg_step_s"))]
if kind == "a14b":
    row("", "forward s", "CFG step s", "low-noise expert forward s", "alternating experts, s per forward",
        "memory, both experts resident")
    row(*["---"] * 6)
    row("diffusers eager", *eager, f(d.get("bf16_eager_expert_2_forward_s")), f(d.get("bf16_eager_switch_forward_s")),
        mem((d.get("both_experts_loaded_bytes"), "loaded"), (d.get("both_experts_forward_peak_bytes"), "peak (allocated)")))
    if "bf16_compile_forward_s" in d:
        row("diffusers + torch.compile (expert 0, stands for both)", *comp, "-", "-",
            mem((d.get("bf16_compile_forward_peak_bytes"), "peak, expert 0 alone")))
    row("fastvideo", *mine, f(o.get("expert_2_forward_s")), f(o.get("expert_switch_forward_s")),
        mem((o.get("gpu_used_after_load_bytes"), "after load (driver)"), ours_peak))
else:
    row("", "forward s", "CFG step s", "VAE decode s", "VAE decode memory")
    row(*["---"] * 5)
    row("diffusers eager", *eager, f"bf16 {f(d.get('vae_decode_bf16_s'))}, fp32 {f(d.get('vae_decode_fp32_s'))}",
        mem((d.get("vae_decode_bf16_peak_bytes"), "bf16 peak (allocated)"), (d.get("vae_decode_fp32_peak_bytes"), "fp32 peak")))
    if "bf16_compile_forward_s" in d:
        row("diffusers + torch.compile", *comp, "-", "-")
    row("fastvideo", *mine, f"{o.get('vae_dtype', '')} {f(o.get('vae_decode_s'))}".strip(),
        mem((o.get("gpu_used_after_vae_bytes"), "after VAE (driver)"), ours_peak))
off = read("ours_offload.json")
if off:
    p = off.get("peak_gpu_smi_mib")
    sw, bl, one = off.get("expert_switch_forward_s"), off.get("expert_switch_blocking_forward_s"), off.get("forward_s")
    cost = lambda x: f"{2 * (x - one):.3f}" if isinstance(x, float) and isinstance(one, float) else "-"
    print(f"fastvideo --offload-experts: alternating experts {f(sw)} s per forward streamed (a swap costs {cost(sw)} s "
          f"over a plain forward), {f(bl)} s with blocking swaps ({cost(bl)} s); host time per swap "
          f"{f(off.get('expert_swap_s'))} s; after load {gib(off.get('gpu_used_after_load_bytes'))}, "
          f"peak {gib(p * 2**20) if p else '-'}; forward after a streamed swap bitwise equal to the resident one: "
          f"{off.get('expert_switch_exact')}")
if d.get("gpu", "cpu") != "cpu" or o.get("gpu_used_after_load_bytes"):
    print("memory: diffusers' is torch.cuda's allocated bytes of that phase's modules alone; ours is the driver's view "
          "(every component resident, the allocator's cache and the CUDA context included)")
if all(os.path.exists(os.path.join(out, n)) for n in ("ours_velocity.safetensors", "ref_bf16.safetensors")):
    a = load_file(os.path.join(out, "ours_velocity.safetensors"))["velocity"].float()
    b = load_file(os.path.join(out, "ref_bf16.safetensors"))["velocity"].float()
    rel = ((a - b).norm() / b.norm()).item()
    print(f"velocity{' (expert 0)' if kind == 'a14b' else ''}: relative L2 error ours vs diffusers bf16 eager {rel:.3e}")
PY
}

stage make make_model
stage inputs inputs
stage ours ours || true
stage offload offload || true
stage diffusers diffusers || true
stage compare compare
