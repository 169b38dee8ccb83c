#!/usr/bin/env bash
# Fetches the CPU part of libtorch 2.11.0 (the exact build the GPU machines' PyTorch 2.11.0+cu130
# has) from PyPI's torch wheel into .libtorch/, which .cargo/config.toml points LIBTORCH at, and
# installs Debian's ffmpeg libraries (host/scripts/ffmpeg.sh) for the video-input decoder.
# Idempotent: a second run with the folder in place does nothing. Needs python3 with pip and unzip
# (falls back to python's zipfile when unzip is missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# The binary's default `ffmpeg` feature (video inputs) builds against Debian's ffmpeg libraries.
bash "$root/host/scripts/ffmpeg.sh"
dest="$root/.libtorch"
stamp="$dest/.fastvideo-bootstrap-2.11.0"
if [ -f "$stamp" ]; then
  exit 0
fi
command -v python3 >/dev/null || { echo "bootstrap: python3 with pip is needed to fetch libtorch from PyPI" >&2; exit 1; }
cache="${FASTVIDEO_WHEEL_CACHE:-$root/.libtorch-wheels}"
mkdir -p "$cache"
echo "bootstrap: fetching torch==2.11.0 and CUDA runtime stubs from PyPI into $cache (~530 MB, once)" >&2
python3 -m pip download --quiet --no-deps -d "$cache" \
  torch==2.11.0 'nvidia-cuda-runtime==13.0.96' 'nvidia-cuda-cupti==13.0.85'
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
extract() { # wheel, then member patterns
  python3 - "$@" <<'PY'
import fnmatch, sys, zipfile
wheel, out, *pats = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if any(fnmatch.fnmatch(n, p) for p in pats):
            z.extract(n, out)
PY
}
torch_whl=$(ls "$cache"/torch-2.11.0-*.whl | head -n1)
extract "$torch_whl" "$dest.tmp/w" 'torch/include/*' 'torch/lib/libtorch_cpu.so' 'torch/lib/libtorch.so' \
  'torch/lib/libc10.so' 'torch/lib/libgomp.so.1' 'torch/version.py'
extract "$(ls "$cache"/nvidia_cuda_runtime-*.whl | head -n1)" "$dest.tmp/w" 'nvidia/cu13/lib/libcudart.so.13'
extract "$(ls "$cache"/nvidia_cuda_cupti-*.whl | head -n1)" "$dest.tmp/w" 'nvidia/cu13/lib/libcupti.so.13'
mkdir -p "$dest.tmp/lib"
mv "$dest.tmp/w/torch/include" "$dest.tmp/include"
mv "$dest.tmp/w/torch/lib/"* "$dest.tmp/lib/"
mv "$dest.tmp/w/nvidia/cu13/lib/"* "$dest.tmp/lib/"
echo "2.11.0" > "$dest.tmp/build-version"
rm -rf "$dest.tmp/w"
rm -rf "$dest" && mv "$dest.tmp" "$dest"
touch "$stamp"
echo "bootstrap: libtorch 2.11.0 (CPU) ready in $dest" >&2
