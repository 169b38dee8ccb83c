#!/usr/bin/env bash
# One GPU session of the image-to-video model's training (recipe: train_i2v.py). Run from the repo
# root on the GPU machine with the pinned wheels in .whl/ and the release binary at $FASTVIDEO_BIN
# (or gzipped at .gpu-pack/fastvideo.gz).
#   usage: train_i2v_on_gpu.sh OUT_DIR MINUTES [CLIPS]
# Resumes from $CKPT_IN (a folder an earlier run wrote) when set; FLAGS go to train_i2v.py (e.g.
# --anneal for the last run). Writes OUT_DIR/i2v.tgz.part-* (device runs return files of at most
# 16 MiB; `cat i2v.tgz.part-* | tar -xzf -` puts the folder back together).
set -euo pipefail
out=$1 minutes=$2 clips=${3:-24000}
bin=${FASTVIDEO_BIN:-.gpu/fastvideo}
if [ ! -x "$bin" ] && [ -f .gpu-pack/fastvideo.gz ]; then
  mkdir -p "$(dirname "$bin")" && gunzip -c .gpu-pack/fastvideo.gz > "$bin" && chmod +x "$bin"
fi
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
python3 -c 'import diffusers, transformers, torch; print("diffusers", diffusers.__version__, "transformers", transformers.__version__, "torch", torch.__version__, torch.cuda.get_device_name())'
t0=$(date +%s)
"$bin" dataset --out /tmp/data --clips "$clips" --seed 0
echo "dataset: $clips clips in $(($(date +%s) - t0)) s"
mkdir -p /tmp/i2vckpt "$out"
if [ -n "${CKPT_IN:-}" ]; then cp -r "$CKPT_IN"/. /tmp/i2vckpt/; fi
python3 models/training/train_i2v.py --data /tmp/data --init models/default --out /tmp/i2vckpt --minutes "$minutes" \
  --batch "${BATCH:-256}" ${FLAGS:-} 2>&1 | grep -v -i "warn\|it/s\]\|should be kept in float32"
tar -C /tmp/i2vckpt -czf - . | split -b 12M - "$out/i2v.tgz.part-"
ls -la /tmp/i2vckpt "$out"
