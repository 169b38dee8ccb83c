#!/usr/bin/env bash
# Installs what the `ffmpeg` feature (video inputs decoded by ffmpeg's libraries; the `fastvideo`
# binary's default) builds against, from Debian's packages, once: the libav* development files
# (ffmpeg-sys-next links them through pkg-config) and libclang (its bindgen reads their headers);
# also Debian's `ffmpeg` for `ffprobe`, which the tests use to read back the MP4s we mux.
# Idempotent: with the libraries found it does nothing. Builds without the feature (the GPU
# machines' build, host/scripts/gpu/build_here.sh) do not need it.
set -euo pipefail
libs="libavcodec libavformat libavutil libswscale"
have_clang() {
  compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null || compgen -G '/usr/lib/*/libclang*.so*' >/dev/null
}
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists $libs && have_clang && command -v ffprobe >/dev/null; then
  exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "ffmpeg.sh: ffmpeg's libraries are missing and installing them needs root (apt-get install libavcodec-dev libavformat-dev libavutil-dev libswscale-dev pkg-config libclang-dev ffmpeg)" >&2; exit 1; }
  sudo="sudo"
fi
packages="libavcodec-dev libavformat-dev libavutil-dev libswscale-dev pkg-config libclang-dev ffmpeg"
echo "ffmpeg.sh: installing Debian's ffmpeg libraries, ffprobe and libclang (~80 MB download, once)" >&2
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
$sudo apt-get install -y -q --no-install-recommends $packages >/dev/null 2>&1 || {
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends $packages >/dev/null
}
# shellcheck disable=SC2086
pkg-config --exists $libs || { echo "ffmpeg.sh: $libs did not install" >&2; exit 1; }
echo "ffmpeg.sh: libavcodec $(pkg-config --modversion libavcodec)" >&2
