#!/usr/bin/env bash
# One GPU session of the world model's training (recipe: train_world.py). Run from the repo root
# on the GPU machine with the pinned wheels in .whl/ and the release binary at $FASTVIDEO_BIN.
#   usage: train_world_on_gpu.sh OUT_DIR MINUTES [CLIPS]
# Resumes from $CKPT_IN (a folder written by an earlier run) when set. Writes OUT_DIR/world.tgz.
set -euo pipefail
out=$1 minutes=$2 clips=${3:-12000}
bin=${FASTVIDEO_BIN:-.gpu/fastvideo}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
# The binary links libtorch's CPU part: point it at the machine's PyTorch.
LD_LIBRARY_PATH="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib"
export LD_LIBRARY_PATH
t0=$(date +%s)
"$bin" dataset --world --out /tmp/wdata --clips "$clips" --steps 9 --seed 0
echo "dataset: $clips clips in $(($(date +%s) - t0)) s"
mkdir -p /tmp/wckpt
if [ -n "${CKPT_IN:-}" ]; then cp -r "$CKPT_IN"/. /tmp/wckpt/; fi
python3 models/training/train_world.py --data /tmp/wdata --init models/default --out /tmp/wckpt --minutes "$minutes" \
  --batch "${BATCH:-256}" ${FLAGS:-} 2>&1 | grep -v -i "warn\|it/s\]\|should be kept in float32"
mkdir -p "$out"
tar -C /tmp/wckpt -czf "$out/world.tgz" .
ls -la "$out"
