#!/usr/bin/env bash
# One device call: renders the training clips with the release binary, then trains the tiny
# decoders of the default and the world model (train_tiny_vae.py) on the GPU and leaves them in
# $OUT/default_tiny_vae and $OUT/world_tiny_vae (copy them to models/default/tiny_vae and
# models/world/tiny_vae). Resumes from those folders when models/*/tiny_vae exist.
#   needs  .gpu-pack/fastvideo.xz (or .gpu/fastvideo) and .gpu-pack/site.tar.xz (diffusers)
#   usage  bash models/training/train_tiny_vae_on_gpu.sh MINUTES_DEFAULT MINUTES_WORLD
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
OUT="${OUT:-/tmp/tiny-vae-out}"
if [ ! -x "$BIN" ] && [ -f .gpu-pack/fastvideo.xz ]; then
  mkdir -p "$(dirname "$BIN")" && xz -dc .gpu-pack/fastvideo.xz >"$BIN" && chmod +x "$BIN"
fi
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
mkdir -p "$OUT"
for m in default world; do
  [ -d "models/$m/tiny_vae" ] && [ ! -d "$OUT/${m}_tiny_vae" ] && cp -r "models/$m/tiny_vae" "$OUT/${m}_tiny_vae"
done
"$BIN" dataset --out /tmp/tv-data --clips 4000 --seed 11 >/dev/null
python3 models/training/train_tiny_vae.py --model models/default --data /tmp/tv-data --device cuda --batch 32 \
  --out "$OUT/default_tiny_vae" --minutes "${1:-2}" | grep -v "through the full VAE"
"$BIN" dataset --world --out /tmp/tvw-data --clips 2000 --seed 11 >/dev/null
python3 models/training/train_tiny_vae.py --model models/world --data /tmp/tvw-data --device cuda --batch 32 \
  --out "$OUT/world_tiny_vae" --minutes "${2:-2}" | grep -v "through the full VAE"
