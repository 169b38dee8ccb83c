#!/usr/bin/env bash
# One GPU session of the default model with sound (see train_sound.py for the recipe).
# Run from the repo root on the GPU machine (torch 2.11 and transformers 5 installed there), with
# the pinned wheels (.whl/ from host/scripts/gpu/fetch_wheels.sh, or .gpu-pack/site.tar.xz), the
# release `fastvideo` binary at $FASTVIDEO_BIN (.gpu/fastvideo) or .gpu-pack/fastvideo.xz, and an earlier checkpoint (if any) in $CKPT_IN to resume from: the
# parts of an earlier run's archive (CKPT_IN=ckpt/sound.tgz for ckpt/sound.tgz.part-*) or a folder.
#   usage: train_sound_on_gpu.sh OUT_TGZ VAE_MINUTES AUDIO_MINUTES DIT_MINUTES [CLIPS]
# The vae and audio stages are independent and small: they run at once on the one GPU (the call
# takes the longer of the two), then the dit stage. A stage given 0 minutes is skipped.
# Env: VAE_BATCH (32), AUDIO_BATCH (64), DIT_BATCH (256), VAE_FLAGS (e.g. --edge-weight 1),
# AUDIO_FLAGS, DIT_FLAGS (e.g. --anneal for the last run), DATA_FLAGS (e.g. --size 32 for a dry
# run), SOUND_DATA / SOUND_CKPT (the work folders, /tmp/sound-data and /tmp/sound-ckpt), EVAL_LIMIT (scenes for a closing
# `fastvideo eval --seeds 1`, written to OUT_TGZ.eval.txt; 0 skips it, the default).
# The checkpoint is packed into OUT_TGZ after each stage, so a run cut short keeps what it did.
set -euo pipefail
out_tgz=$1 vae_min=$2 audio_min=$3 dit_min=$4 clips=${5:-24000}
bin=${FASTVIDEO_BIN:-.gpu/fastvideo}
data=${SOUND_DATA:-/tmp/sound-data} ckpt=${SOUND_CKPT:-/tmp/sound-ckpt}
# The pinned wheels (.whl/ or .gpu-pack/site.tar.xz) into /tmp/site, the binary from
# .gpu-pack/fastvideo.xz when carried so, and the machine's torch libraries for it. (Without
# wheels, as for a dry run on a CPU machine, the python3 on PATH must have the stack.)
# shellcheck source=../../host/scripts/gpu/torch_env.sh
FASTVIDEO_BIN="$bin" source host/scripts/gpu/torch_env.sh
python3 -c 'import diffusers, transformers, torch; print("diffusers", diffusers.__version__, "transformers", transformers.__version__, "torch", torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")'
t0=$(date +%s)
# A warm machine keeps /tmp: the data of an earlier call is reused when it has as many clips.
if ! python3 -c "import json, sys; sys.exit(json.load(open('$data/clips.json'))['shape'][0] != $clips)" 2>/dev/null; then
  rm -rf "$data"
  "$bin" dataset --out "$data" --clips "$clips" --seed 0 --sound --fps 24 ${DATA_FLAGS:-}
fi
echo "dataset: $clips clips with sound in $(($(date +%s) - t0)) s"
rm -rf "$ckpt" && mkdir -p "$ckpt"
# Device runs return files of at most 16 MiB: the archive travels in 12 MiB parts
# (`cat OUT.part-* | tar -xzf -` puts it back together).
pack() { rm -f "$out_tgz".part-*; tar -C "$ckpt" -czf - . | split -b 12M - "$out_tgz.part-"; }
if [ -n "${CKPT_IN:-}" ] && [ -f "$CKPT_IN.part-aa" ]; then cat "$CKPT_IN".part-* | tar -C "$ckpt" -xzf -; fi
if [ -n "${CKPT_IN:-}" ] && [ -d "$CKPT_IN" ]; then cp -r "$CKPT_IN"/. "$ckpt"/; fi
train() { python3 models/training/train_sound.py --data "$data" --out "$ckpt" "$@"; }
# Each stage logs to $ckpt.<stage>.log (shown when it ends); one that fails does not stop the
# other from being packed.
pids=() names=() failed=0
if [ "$vae_min" != 0 ]; then
  train --stage vae --minutes "$vae_min" --batch "${VAE_BATCH:-32}" ${VAE_FLAGS:-} >"$ckpt.vae.log" 2>&1 &
  pids+=($!) names+=(vae)
fi
if [ "$audio_min" != 0 ]; then
  train --stage audio --minutes "$audio_min" --batch "${AUDIO_BATCH:-64}" ${AUDIO_FLAGS:-} >"$ckpt.audio.log" 2>&1 &
  pids+=($!) names+=(audio)
fi
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "stage ${names[$i]} failed"; failed=1; }
  grep -v Warning "$ckpt.${names[$i]}.log" | tail -n 25 || true
done
[ "${#pids[@]}" = 0 ] || pack
[ "$failed" = 0 ]
if [ "$dit_min" != 0 ]; then
  # Packed even when the stage fails after saving (what it trained comes back).
  train --stage dit --minutes "$dit_min" --batch "${DIT_BATCH:-256}" ${DIT_FLAGS:-} || failed=1
  pack
  [ "$failed" = 0 ]
fi
if [ "${EVAL_LIMIT:-0}" != 0 ]; then
  "$bin" eval --model "$ckpt" --limit "$EVAL_LIMIT" --seeds 1 2>&1 | tee "$out_tgz.eval.txt" | tail -12
fi
du -sh "$ckpt"/* && ls -la "$out_tgz".part-*
