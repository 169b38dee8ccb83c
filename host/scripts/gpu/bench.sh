#!/usr/bin/env bash
# shellcheck disable=SC2329  # the stage functions are called through stage()
# The GPU benchmark, run from the repo root on the GPU machine (no network there): our binary vs
# diffusers on one random-weight Wan2.1-T2V-1.3B folder, same weights and inputs.
#   needs  .whl/ (host/scripts/gpu/fetch_wheels.sh, run where PyPI is) and the binary at
#          ${FASTVIDEO_BIN:-.gpu/fastvideo}; python3 with torch 2.11.0+cu130 and transformers 5
#   env    STAGES="make diffusers dmem ours oursclip compare" (the default; also: plugins small serve)  OUT=/tmp/bench  MODEL=/tmp/wan13b
#          CLIP_STEPS=0 (50 adds a whole-clip diffusers run)  RUNS=5  SKIP_COMPILE=1
#          OURS_VARIANTS="kernels_off:--kernels off;other:--flag x" (each: NAME:EXTRA FLAGS; leading
#          VAR=value words are set in the run's environment, e.g. "qrow:FASTVIDEO_ATTN8_RECIPE=qrow --precision fast";
#          host/scripts/gpu/variant.sh)
#          DEVICE=cuda FRAMES=81 HEIGHT=480 WIDTH=832 MAKE_ARGS= (--tiny: a CPU check of the plumbing)
# With CLIP_STEPS=0 all stages fit one 10-minute call; else run STAGES=... in separate calls.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
STAGES="${STAGES:-make diffusers dmem ours oursclip compare}"
OUT="${OUT:-/tmp/bench}"
MODEL="${MODEL:-/tmp/wan13b}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
RUNS="${RUNS:-5}"
DEVICE="${DEVICE:-cuda}"
SIZE=(--frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}")
S=host/scripts/gpu
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# torch_env.sh unpacks the binary too (it travels compressed: the 64 MiB a call carries).
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh

# shellcheck source=host/scripts/gpu/stage.sh
source host/scripts/gpu/stage.sh
# shellcheck source=host/scripts/gpu/variant.sh
source host/scripts/gpu/variant.sh

make_model() { # built once per machine; MODEL=... with another folder to rebuild
  if [ -f "$MODEL/model_index.json" ]; then echo "$MODEL exists"; return; fi
  # shellcheck disable=SC2086  # MAKE_ARGS holds flags
  python3 "$S/make_wan13b.py" "$MODEL" --device "$DEVICE" ${MAKE_ARGS:-}
}

diffusers() {
  python3 "$S/diffusers_bench.py" --model "$MODEL" --out "$OUT" --device "$DEVICE" "${SIZE[@]}" --runs "$RUNS" \
    --clip-steps "${CLIP_STEPS:-0}" ${SKIP_COMPILE:+--skip-compile}
}

run_ours() { # name, [VAR=value...], extra flags...: one JSON object in $OUT/<name>.json, nvidia-smi peak merged in
  local name=$1 vel smi pid rc=0
  [ -x "$BIN" ] || { echo "ours: no binary at $BIN" >&2; return 1; }
  shift
  variant_words "$@"
  vel="$OUT/${name}_velocity.safetensors"
  smi="$OUT/${name}_smi.txt"
  rm -f "$vel"  # a stale velocity from an earlier run would be scored as this run's
  : >"$smi"
  pid=
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${GPU_INDEX:-0}" -lms 200 >"$smi" &
    pid=$!
  fi
  env ${VARIANT_ENV[@]+"${VARIANT_ENV[@]}"} "$BIN" bench --model "$MODEL" --device "$DEVICE" --dtype bf16 "${SIZE[@]}" \
    --runs "$RUNS" --inputs "$OUT/inputs.safetensors" --outputs "$vel" --json ${VARIANT_FLAGS[@]+"${VARIANT_FLAGS[@]}"} >"$OUT/$name.json" 2> >(tee "$OUT/$name.log" >&2) || rc=$?
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  python3 -c 'import json, sys
p, smi = sys.argv[1:]
mib = [int(x) for x in open(smi).read().split() if x.isdigit()]
try:
    o = json.load(open(p))
except ValueError:
    sys.exit(f"ours: {p} is not one JSON object")
o["peak_gpu_smi_mib"] = max(mib) if mib else None  # whole GPU, every process: compare with the base
o["base_gpu_smi_mib"] = mib[0] if mib else None
json.dump(o, open(p, "w"))' "$OUT/$name.json" "$smi" || { [ "$rc" -ne 0 ] || rc=1; }
  echo "$name: exit $rc"
  return "$rc"
}

ours() {
  local fail=0 v name
  run_ours ours || fail=1
  IFS=';' read -ra variants <<<"${OURS_VARIANTS:-}"
  for v in "${variants[@]}"; do
    [ -n "$v" ] || continue
    name="ours_$(printf %s "${v%%:*}" | tr -c 'A-Za-z0-9_-' _)"  # a plain file name
    # shellcheck disable=SC2086
    run_ours "$name" ${v#*:} || fail=1
  done
  return "$fail"
}

diffusers_mem() { # the same work as ours in one process, peak read the same way (nvidia-smi)
  local smi="$OUT/diffusers_mem_smi.txt" pid rc=0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "${GPU_INDEX:-0}" -lms 200 >"$smi" &
  pid=$!
  python3 "$S/diffusers_mem.py" --model "$MODEL" --inputs "$OUT/inputs.safetensors" --out "$OUT/diffusers_mem.json" || rc=$?
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  python3 -c 'import json, sys
p, smi = sys.argv[1:]
mib = [int(x) for x in open(smi).read().split() if x.isdigit()]
o = json.load(open(p)); o["peak_gpu_smi_mib"] = max(mib) if mib else None; json.dump(o, open(p, "w"))' "$OUT/diffusers_mem.json" "$smi" || rc=1
  return "$rc"
}

ours_clip() { # a whole generation through the pipeline (text encode, CLIP_STEPS CFG steps, decode, MP4)
  local rc=0
  [ "${CLIP_STEPS:-0}" -gt 0 ] || { echo "oursclip: CLIP_STEPS=0, skipped"; return 0; }
  "$BIN" generate --model "$MODEL" --device "$DEVICE" --prompt "a red circle moving left" --seed 0 \
    --steps "$CLIP_STEPS" "${SIZE[@]}" --out /tmp/ours_clip.mp4 --json --quiet >"$OUT/ours_clip_run.json" || rc=$?
  python3 -c 'import json, sys
run, ours = sys.argv[1:]
m = json.load(open(run))["metrics"]
node = dict(m["node_seconds"])
o = json.load(open(ours)) if __import__("os").path.exists(ours) else {}
o.update(clip_denoise_s=node.get("denoise"), clip_total_s=m["total_seconds"], clip_steps=m["steps"],
         clip_vae_decode_s=node.get("vae_decode"), clip_text_encode_s=node.get("text_encode"))
json.dump(o, open(ours, "w"))
print("ours clip:", {k: o[k] for k in ("clip_denoise_s", "clip_total_s", "clip_vae_decode_s")})' "$OUT/ours_clip_run.json" "$OUT/ours.json" || rc=1
  return "$rc"
}

ours_plugins() { # plugins at real size: built-in CFG, the cfg guider plugin, FBCache (deploys/ from examples/plugins-deploy.sh)
  local d flag rc=0
  for d in builtin cfg fbcache; do
    flag=()
    [ "$d" = builtin ] || flag=(--deploy "deploys/$d.toml")
    "$BIN" generate --model "$MODEL" --device "$DEVICE" --prompt "a red circle moving left" --seed 0 \
      --steps "${PLUGIN_STEPS:-10}" "${SIZE[@]}" --out /tmp/ours_plugin.mp4 --json --quiet "${flag[@]}" \
      >"$OUT/plugin_$d.json" 2>"$OUT/plugin_$d.log" || { echo "plugin $d: failed"; tail -3 "$OUT/plugin_$d.log"; rc=1; }
  done
  python3 -c 'import json, os, sys
out = sys.argv[1]; r = {}
for d in ("builtin", "cfg", "fbcache"):
    p = f"{out}/plugin_{d}.json"
    if not os.path.exists(p) or not os.path.getsize(p): continue
    m = json.load(open(p))["metrics"]; st = m["step_seconds"]
    r[d] = dict(denoise_s=dict(m["node_seconds"]).get("denoise"), step_mean_s=sum(st) / len(st), forwards=m["forwards"],
                plugin_seconds=m["plugin_seconds"], steps=m["steps"])
json.dump(r, open(f"{out}/plugins.json", "w"), indent=1); print(json.dumps(r, indent=1))' "$OUT" || rc=1
  return "$rc"
}

ours_small() { # the default model at its own shape on the GPU: the launch-bound regime
  "$BIN" bench --device "$DEVICE" --frames 17 --height 64 --width 64 --runs 20 --json >"$OUT/ours_small.json" &&
    python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))
print("small:", {k: o[k] for k in ("forward_s", "forward_enqueue_s", "cfg_step_s", "forward_batch2_s", "vae_decode_s")})' "$OUT/ours_small.json"
}

ours_serve() { # a real-size request through the HTTP server: admitted, run, stored (SERVE_STEPS steps)
  local port=8123 pid rc=0 id body state
  "$BIN" serve --model "$MODEL" --device "$DEVICE" --port "$port" --ephemeral 2>"$OUT/serve.log" &
  pid=$!
  for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null && break; sleep 0.5; done
  body=$(curl -s -X POST "http://127.0.0.1:$port/v1/videos" -H 'content-type: application/json' \
    -d "{\"prompt\":\"a red circle moving left\",\"width\":${WIDTH:-832},\"height\":${HEIGHT:-480},\"num_frames\":${FRAMES:-81},\"num_inference_steps\":${SERVE_STEPS:-2},\"seed\":0}")
  echo "submit: $body"
  id=$(printf %s "$body" | python3 -c 'import json, sys; print(json.load(sys.stdin).get("id", ""))')
  state=
  if [ -n "$id" ]; then
    for _ in $(seq 1 240); do
      state=$(curl -s "http://127.0.0.1:$port/v1/videos/$id" | python3 -c 'import json, sys; print(json.load(sys.stdin)["status"])')
      case $state in completed | failed) break ;; esac
      sleep 0.5
    done
  fi
  echo "final status: ${state:-none}"
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^fastvideo_(predicted_request_seconds_(sum|count)|step_seconds_(sum|count))' || true
  kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  grep -E 'admitting|serving' "$OUT/serve.log" || true
  [ "$state" = completed ] || rc=1
  return "$rc"
}

status=0
stage make make_model
stage diffusers diffusers
stage dmem diffusers_mem || status=1
stage ours ours || status=1  # a failed run of ours still gets its table, with — where it failed
stage oursclip ours_clip || status=1
stage plugins ours_plugins || status=1
stage small ours_small || status=1
stage serve ours_serve || status=1
stage compare python3 "$S/compare.py" --dir "$OUT"
exit "$status"
