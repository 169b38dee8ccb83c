#!/usr/bin/env bash
# One GPU session of the default model's training (see train_default.py for the recipe).
# Run from the repo root on the GPU machine, with the pinned wheels in .whl/ (diffusers 0.42.1,
# transformers 5.24.0, tokenizers 0.23.3, importlib_metadata, regex), a release `fastvideo`
# binary at $FASTVIDEO_BIN, and an earlier checkpoint (if any) in $CKPT_IN to resume from
# (e.g. CKPT_IN=models/default; train_log.jsonl/train_state.json come from models/training/logs).
#   usage: train_on_gpu.sh OUT_TGZ VAE_MINUTES DIT_MINUTES [CLIPS]
# Env: VAE_BATCH (32), DIT_BATCH (256), VAE_FLAGS (e.g. --edge-weight 1 --single-frames, or
# --decoder-only to keep the latent space), DIT_FLAGS (e.g. --anneal for the last run).
# The checkpoint is packed into OUT_TGZ after each stage, so a run cut short keeps what it did.
set -euo pipefail
out_tgz=$1 vae_min=$2 dit_min=$3 clips=${4:-24000}
bin=${FASTVIDEO_BIN:-.gpu/fastvideo}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
LD_LIBRARY_PATH="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')/lib"
export LD_LIBRARY_PATH
python3 -c 'import diffusers, transformers, torch; print("diffusers", diffusers.__version__, "transformers", transformers.__version__, "torch", torch.__version__, torch.cuda.get_device_name())'
t0=$(date +%s)
"$bin" dataset --out /tmp/data --clips "$clips" --seed 0
echo "dataset: $clips clips in $(($(date +%s) - t0)) s"
mkdir -p /tmp/ckpt
# Device runs return files of at most 16 MiB: the archive travels in 12 MiB parts
# (`cat OUT.part-* | tar -xzf -` puts it back together).
pack() { rm -f "$out_tgz".part-*; tar -C /tmp/ckpt -czf - . | split -b 12M - "$out_tgz.part-"; }
# Resume from an archive of an earlier run (CKPT_IN.part-*) or a checkpoint folder (models/default).
if [ -n "${CKPT_IN:-}" ] && [ -f "$CKPT_IN.part-aa" ]; then cat "$CKPT_IN".part-* | tar -C /tmp/ckpt -xzf -; fi
if [ -n "${CKPT_IN:-}" ] && [ -d "$CKPT_IN" ]; then cp -r "$CKPT_IN"/. /tmp/ckpt/; fi
if [ "$vae_min" != 0 ]; then
  python3 models/training/train_default.py --data /tmp/data --out /tmp/ckpt --stage vae --minutes "$vae_min" --batch "${VAE_BATCH:-32}" ${VAE_FLAGS:-}
  pack
fi
if [ "$dit_min" != 0 ]; then
  python3 models/training/train_default.py --data /tmp/data --out /tmp/ckpt --stage dit --minutes "$dit_min" --batch "${DIT_BATCH:-256}" ${DIT_FLAGS:-}
fi
pack
ls -la /tmp/ckpt "$out_tgz".part-*
