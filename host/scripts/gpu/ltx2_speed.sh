#!/usr/bin/env bash
# Issue 57, speed at the published shape: the fused LTX-2 kernels (kernels/cuda/norms.cu:
# rms_modulate_*, rms_rope_split_*) checked against their fallbacks on the GPU, one forward of a
# 2-block cut of the published transformer profiled kernel by kernel (Nsight Compute,
# forward_profile.py), `fastvideo bench-ltx2` with the kernels off (FASTVIDEO_NO_KERNELS=1, the
# path before them) and on, and diffusers eager / torch.compile beside it (ltx2_bench.sh), all
# in one call. Carry .gpu-pack/{fastvideo.xz,kernels-parity.xz,site.tar.xz,libfastvideo_graph.so}.
#   env  OUT=/tmp/out  NCU=/usr/local/cuda/bin/ncu  SKIP_PROFILE=  SKIP_DIFFUSERS=
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
CFG=host/scripts/gpu/ltx2_transformer_config.json
t0=$(date +%s)
if [ -f .gpu-pack/kernels-parity.xz ]; then
  xz -dc .gpu-pack/kernels-parity.xz >.gpu/kernels-parity && chmod +x .gpu/kernels-parity
  bash host/scripts/gpu/kernels.sh >"$OUT/kernels.txt" 2>&1 || { tail -40 "$OUT/kernels.txt"; exit 1; }
  grep -E "test result|rel" "$OUT/kernels.txt" | tail -5
fi
echo "[$(($(date +%s) - t0)) s] kernels checked"
if [ -z "${SKIP_PROFILE:-}" ]; then
  python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["num_layers"]=2; json.dump(c,open(sys.argv[2],"w"))' \
    "$CFG" /tmp/ltx2_2blocks.json
  "${NCU:-/usr/local/cuda/bin/ncu}" --csv --page raw --metrics gpu__time_duration.sum --clock-control none \
    --cache-control none --launch-count "${LAUNCHES:-1100}" "$BIN" bench-ltx2 --config /tmp/ltx2_2blocks.json \
    --frames 121 --height 512 --width 768 --runs 1 --device cuda --dtype bf16 >"$OUT/profile.csv" 2>"$OUT/profile.log" || tail -5 "$OUT/profile.log"
  python3 host/scripts/gpu/forward_profile.py "$OUT/profile.csv" --marker rms_rope_split --per-forward 12 --top 30 \
    | tee "$OUT/profile.txt" || true
  rm -f "$OUT/profile.csv"
fi
echo "[$(($(date +%s) - t0)) s] profiled"
for shape in "121 512 768" "9 256 256"; do
  read -r f h w <<<"$shape"
  FASTVIDEO_NO_KERNELS=1 "$BIN" bench-ltx2 --config "$CFG" --frames "$f" --height "$h" --width "$w" --runs 3 \
    --device cuda --dtype bf16 >"$OUT/ours_nokernels_${f}x${h}x${w}.json"
  python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); print(sys.argv[2], "kernels off: forward %.1f ms, step %.1f ms" % (o["forward_s"]*1e3, o["step_s"]*1e3))' \
    "$OUT/ours_nokernels_${f}x${h}x${w}.json" "${f}x${h}x${w}"
done
echo "[$(($(date +%s) - t0)) s] kernels-off runs"
if [ -z "${SKIP_DIFFUSERS:-}" ]; then
  bash host/scripts/gpu/ltx2_bench.sh | tee "$OUT/ltx2_bench.txt"
fi
echo "[$(($(date +%s) - t0)) s] done"
