#!/usr/bin/env bash
# Issue 18 on the GPU machine: the transformer split over GPUs (docs/benchmarks.md, "Several
# GPUs"). Run from the repo root there with the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo};
# results go to ${OUT:-/tmp/parallel}. Stages (arguments, in order; default: check small e2e 13b):
#   check  NCCL's all-to-all on every GPU against the in-process exchange, and its bandwidth
#   13b    one CFG step of a Wan-1.3B-shaped transformer (random bf16 weights) at 480p per layout
#   14b    the same for the 14B shape at 480p;  14b720: at 720p
#   e2e    the default model end to end: --gpus N --parallel cfg+sp against one device
# With one GPU every layout runs with all its ranks on that GPU (--one-device /
# FASTVIDEO_PARALLEL_ONE_DEVICE=1): outputs are compared, times show the machinery's overhead,
# not scaling. With 2+ GPUs the layouts that fit run on separate GPUs over NCCL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
OUT="${OUT:-/tmp/parallel}"
mkdir -p "$OUT"
GPUS=$(python3 -c 'import torch; print(torch.cuda.device_count())')
nvidia-smi topo -m > "$OUT/topology.txt" 2>&1 || true
if [ "$GPUS" -lt 2 ]; then ONE=(--one-device); N=4; else ONE=(); N=$GPUS; fi
layouts() { # heads -> the layouts that fit N GPUs and divide the heads
  python3 - "$1" "$N" <<'PY'
import sys
heads, n = int(sys.argv[1]), int(sys.argv[2])
out = ["1"]
for g in (2, 4, 8):
    if g > n: break
    if heads % g == 0: out.append(f"sp:{g}")
    if g == 2: out.append("cfg:2")
    elif heads % (g // 2) == 0: out.append(f"cfg+sp:{g}")
print(",".join(out))
PY
}
# e2e_pair FRAMES H W "PARALLEL FLAGS" [STEPS] [ENV=VALUE]: the default model at that size on one
# device (with ENV set), then with the flags (ranks on one GPU when there is only one);
# prints latents/video differences.
e2e_pair() {
  local common=(generate --device cuda --prompt "a red circle moving left on a white background" --seed 5
                --frames "$1" --height "$2" --width "$3" --steps "${5:-20}" --quiet --json)
  env ${6:-} "$BIN" "${common[@]}" --out "$OUT/one.mp4" --trajectory-out "$OUT/one.safetensors" > "$OUT/one.json"
  if [ "$GPUS" -lt 2 ]; then export FASTVIDEO_PARALLEL_ONE_DEVICE=1; fi
  # shellcheck disable=SC2086
  "$BIN" "${common[@]}" $4 --out "$OUT/par.mp4" --trajectory-out "$OUT/par.safetensors" > "$OUT/par.json"
  unset FASTVIDEO_PARALLEL_ONE_DEVICE
  python3 - "$OUT" "$2" "$4" "${5:-20}" <<'PY'
import json, sys
from safetensors.torch import load_file
out, size, flags = sys.argv[1:4]
a, b = load_file(f"{out}/one.safetensors"), load_file(f"{out}/par.safetensors")
la, lb = a["latents"].float(), b["latents"].float()
va, vb = a["video"].float(), b["video"].float()
ma, mb = (json.load(open(f"{out}/{n}.json")).get("metrics", {}) for n in ("one", "par"))
print(json.dumps({"e2e": size, "flags": flags, "steps": int(sys.argv[4]), "latents_rel_err": ((la - lb).abs().max() / la.abs().max()).item(),
                  "video_max_abs_diff": (va - vb).abs().max().item(),
                  "one_denoise_s": dict(ma.get("node_seconds", [])).get("denoise"),
                  "parallel_denoise_s": dict(mb.get("node_seconds", [])).get("denoise")}))
PY
}
echo "gpus: $GPUS ${ONE[*]}"
for stage in "${@:-check 13b e2e}"; do
  for s in $stage; do
    case "$s" in
      check) "$BIN" bench-parallel --device cuda --check-collectives | tee "$OUT/collectives.json" ;;
      13b) "$BIN" bench-parallel --shape wan-1.3b --device cuda --layouts "$(layouts 12)" "${ONE[@]}" --runs 3 \
             > "$OUT/wan13b_480p.json" ;;
      14b) "$BIN" bench-parallel --shape wan-14b --device cuda --layouts "$(layouts 40)" "${ONE[@]}" --runs 2 \
             > "$OUT/wan14b_480p.json" ;;
      14b720) "$BIN" bench-parallel --shape wan-14b --device cuda --height 720 --width 1280 \
             --layouts "${LAYOUTS_720:-$(layouts 40)}" "${ONE[@]}" --runs 1 > "$OUT/wan14b_720p.json" ;;
      e2e)
        for size in "17 64 64" "33 256 256"; do
          e2e_pair $size "--gpus $N --parallel cfg+sp" | tee -a "$OUT/e2e.jsonl"
        done ;;
      diag) # the 256x256 clip after 1, 3 and 20 steps: one device with its guidance branches one by
        # one (B=1 forwards) vs batched (B=2), and each layout; the transformer alone per layout
        for steps in ${DIAG_STEPS:-1 3 20}; do
          e2e_pair 33 256 256 "" "$steps" FASTVIDEO_NO_BRANCH_BATCH=1 | sed "s/^/one device batched vs one-by-one: /"
          for p in "--gpus 2 --parallel sp" "--gpus 2 --parallel cfg" "--gpus $N --parallel cfg+sp"; do
            e2e_pair 33 256 256 "$p" "$steps" | sed "s/^/$p: /"
            e2e_pair 33 256 256 "$p" "$steps" FASTVIDEO_NO_BRANCH_BATCH=1 | sed "s/^/$p (single one-by-one): /"
          done
        done 2>&1 | sed 's/"one_denoise_s.*//'
        "$BIN" bench-parallel --model models/default --device cuda --frames 33 --height 256 --width 256 \
          --layouts 1,sp:2,cfg:2,cfg+sp:4 "${ONE[@]}" --runs 2 > "$OUT/default_256.json"
        "$BIN" bench-parallel --model models/default --device cuda --frames 33 --height 256 --width 256 \
          --layouts 1,sp:2,sp:4,cfg:2,cfg+sp:4 "${ONE[@]}" --runs 2 --batch-branches > "$OUT/default_256_b2.json"
        "$BIN" bench-parallel --shape wan-1.3b --device cuda --frames 33 --height 256 --width 256 \
          --layouts 1,sp:2,sp:4 "${ONE[@]}" --runs 1 --batch-branches > "$OUT/wan13b_256_b2.json" ;;
      b2) # sequence parallel with both guidance branches as one batch: the transformer, then a clip
        "$BIN" bench-parallel --model models/default --device cuda --frames 33 --height 256 --width 256 \
          --layouts 1,sp:2,sp:4 "${ONE[@]}" --runs 1 --batch-branches > "$OUT/default_256_b2.json"
        e2e_pair 33 256 256 "--gpus 2 --parallel sp" 20 | sed 's/"one_denoise_s.*//' ;;
      *) echo "unknown stage $s" >&2; exit 2 ;;
    esac
  done
done
for f in "$OUT"/wan*.json "$OUT"/default*.json; do [ -f "$f" ] && python3 - "$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[1].split("/")[-1], "tokens", r["tokens"], "nccl", r["nccl_version"], "one_device", r["one_device"])
for l in r["layouts"]:
    print(f"  {l['layout']:>9} {l['ranks']} ranks {l['step_s']:.4f} s/step x{l['speedup']:.2f} "
          f"eff {l['efficiency']:.2f} rel_err {l['rel_err_vs_single']:.2e} [{l['transport']}]")
PY
done
