#!/usr/bin/env bash
# Where one transformer forward's GPU time goes, kernel by kernel: Nsight Compute times every
# kernel `fastvideo bench` launches (one metric, so one pass each; clocks and caches left alone),
# and forward_profile.py sums one forward's worth by kind. Run on the GPU machine from the repo
# root, carrying .gpu-pack/fastvideo.xz (and site.tar.xz or .whl/ for libtorch's CUDA part).
#   env  VARIANTS="fast:--precision fast"  (NAME:FLAGS for `fastvideo bench`; the window is
#        found by MARKER, a kernel run PER_FORWARD times per forward: 8-bit attention, 30)
#        MODEL=/tmp/wan13b (made by make_wan13b.py when missing)  OUT=/tmp/out  LAUNCHES=2500
#        NCU=/usr/local/cuda/bin/ncu  FRAMES=81 HEIGHT=480 WIDTH=832
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
out="${OUT:-/tmp/out}/profile"
model="${MODEL:-/tmp/wan13b}"
ncu="${NCU:-/usr/local/cuda/bin/ncu}"
mkdir -p "$out"
[ -f "$model/model_index.json" ] || python3 host/scripts/gpu/make_wan13b.py "$model" --device cuda
IFS=';' read -ra variants <<<"${VARIANTS:-fast:--precision fast}"
for v in "${variants[@]}"; do
  name="${v%%:*}"
  echo "== $name (${v#*:})"
  # shellcheck disable=SC2086  # the variant's flags
  "$ncu" --csv --page raw --metrics gpu__time_duration.sum --clock-control none --cache-control none \
    --launch-count "${LAUNCHES:-2500}" "$BIN" bench --model "$model" --device cuda --dtype bf16 \
    --frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}" --runs 1 --vae-runs 1 ${v#*:} \
    >"$out/$name.csv" 2>"$out/$name.log" || { tail -5 "$out/$name.log"; continue; }
  python3 host/scripts/gpu/forward_profile.py "$out/$name.csv" --marker "${MARKER:-attention_int8}" \
    --per-forward "${PER_FORWARD:-30}" | tee "$out/$name.txt"
done
