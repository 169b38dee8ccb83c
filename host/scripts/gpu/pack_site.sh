#!/usr/bin/env bash
# Packs the wheels in .whl/ (fetch_wheels.sh) as one xz tarball of their unpacked files,
# .gpu-pack/site.tar.xz: wheels are zip files, and xz over the plain files is a third of their
# size (6.1 → 1.9 MiB for diffusers), which keeps a device call under its 64 MiB. torch_env.sh
# unpacks it into /tmp/site on the GPU machine, where pip would have installed the wheels.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for w in "$root"/.whl/*.whl; do
  python3 -m zipfile -e "$w" "$tmp"
done
find "$tmp" -name __pycache__ -prune -exec rm -rf {} +
# diffusers' pipelines import lazily: keep only those the scripts build (Wan, Cosmos, FLUX.2, Qwen-Image, LTX-2
# with the `ltx` package its upsample pipeline imports from), half the tarball, which keeps a call carrying the
# tree, the binary and this under 64 MiB.
if [ -d "$tmp/diffusers/pipelines" ]; then
  find "$tmp/diffusers/pipelines" -mindepth 1 -maxdepth 1 -type d ! -name wan ! -name cosmos ! -name flux2 \
    ! -name qwenimage ! -name ltx2 ! -name ltx -exec rm -rf {} +
fi
mkdir -p "$root/.gpu-pack"
tar -C "$tmp" -cf - . | xz -9e -T2 > "$root/.gpu-pack/site.tar.xz"
ls -la "$root/.gpu-pack/site.tar.xz"
