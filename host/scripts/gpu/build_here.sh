#!/usr/bin/env bash
# Run HERE (the CPU build machine): builds what a GPU-machine call carries into .gpu/ — the
# release `fastvideo` binary (without ffmpeg, below) and the kernels' parity-test binary — and the
# wheels into .whl/.
# Both folders are git-ignored; name them in the device call's `carry`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
bash host/scripts/bootstrap.sh
# Without the default `ffmpeg` feature: the GPU machine has no libavcodec, and a binary linked
# to it would not start there. Video inputs then decode with OpenH264 (H.264 Constrained
# Baseline in MP4; anything else is refused naming the field).
cargo build --release --locked -p fastvideo --no-default-features
test_bin=$(cargo test --release --locked -p fastvideo-kernels --test parity --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "parity":
        print(m["executable"])')
mkdir -p .gpu
cp target/release/fastvideo .gpu/fastvideo
cp "$test_bin" .gpu/kernels-parity
strip .gpu/fastvideo .gpu/kernels-parity 2>/dev/null || true
[ -x host/scripts/gpu/fetch_wheels.sh ] && bash host/scripts/gpu/fetch_wheels.sh
# The CUDA-graph shim (.gpu-pack/libfastvideo_graph.so) the binary dlopens on the GPU machine.
bash host/scripts/gpu/build_graph_shim.sh
du -sh .gpu .whl 2>/dev/null || true
