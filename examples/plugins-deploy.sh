#!/usr/bin/env bash
# Builds the first-party plugins and writes deploy configs for them, pinned by the hashes of
# what was just built (the hash depends on the compiler, so configs are written, not shipped).
#   bash examples/plugins-deploy.sh [OUT_DIR]      # default: deploys/
# Then e.g.:
#   fastvideo generate --deploy deploys/fbcache.toml --prompt "a red circle moving left on a white background"
#   fastvideo eval --deploy deploys/apg.toml --plugin-param apg.eta=0.5
#   fastvideo generate --deploy deploys/watched.toml --prompt "a blue star moving up on a gray background"
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-deploys}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
fv="${FASTVIDEO:-$root/target/release/fastvideo}"
[ -x "$fv" ] || (cd "$root" && cargo build --release -p fastvideo)
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
cargo build --manifest-path "$root/plugins/Cargo.toml" --target wasm32-unknown-unknown --release
rel="$root/plugins/target/wasm32-unknown-unknown/release"
write() { # name crate_stem grants params...
  local name=$1 stem=$2 grants=$3; shift 3
  "$fv" plugin componentize "$rel/$stem.wasm" -o "$out/$name.wasm"
  local hash; hash=$("$fv" plugin hash "$out/$name.wasm" | cut -d' ' -f1)
  {
    echo "[[plugins]]"
    echo "name = \"$name\""
    echo "source = \"$name.wasm\""
    echo "blake3 = \"$hash\""
    echo "grants = $grants"
    echo "[plugins.params]"
    for p in "$@"; do echo "$p"; done
  } > "$out/$name.toml"
  echo "wrote $out/$name.toml"
}
write cfg fastvideo_guider_cfg '["tensor", "tensor-ops"]'
write cfg-zero-star fastvideo_guider_cfg_zero_star '["tensor", "tensor-ops"]'
write apg fastvideo_guider_apg '["tensor", "tensor-ops"]' 'eta = 0.0'
write fbcache fastvideo_cache_dbcache '["tensor", "tensor-ops", "events"]' 'fn_blocks = 1' 'bn_blocks = 0' 'residual_diff_threshold = 0.08'
write dbcache fastvideo_cache_dbcache '["tensor", "tensor-ops", "events"]' 'fn_blocks = 2' 'bn_blocks = 1' 'residual_diff_threshold = 0.08'
write taylorseer fastvideo_cache_taylorseer '["tensor", "tensor-ops", "events"]' 'order = 1' 'interval = 2' 'warmup_steps = 3'
write nanwatch fastvideo_observer_nanwatch '["tensor", "tensor-ops", "events"]'
write profiler fastvideo_observer_profiler '["tensor", "events", "clock"]' 'per_step = false'
# Wan 2.2 A14B: experts switched by signal-to-noise ratio (the request's boundary by default).
write snr-router fastvideo_router_snr '["log"]'
# LTX-2: the audio-video guidance as a stream guider (the request's own scales unless pinned here).
write ltx2-av fastvideo_guider_ltx2_av '["tensor", "tensor-ops"]'
# Several plugins in one deploy: a guider, a block cache and two observers.
cat "$out/cfg-zero-star.toml" "$out/dbcache.toml" "$out/nanwatch.toml" "$out/profiler.toml" > "$out/watched.toml"
echo "wrote $out/watched.toml"
# RL rewards (examples/rl, docs/rl.md): both scene rewards in one deploy.
write color_match fastvideo_reward_color_match '["tensor", "tensor-ops"]'
write motion_direction fastvideo_reward_motion_direction '["tensor", "tensor-ops"]'
cat "$out/color_match.toml" "$out/motion_direction.toml" > "$out/rewards.toml"
echo "wrote $out/rewards.toml"
# ComfyUI workflows: the core, Wan, KJNodes, FLUX.2, Qwen-Image and LTX-2 translator packs, and the model
# files of ComfyUI's
# Wan 2.1 templates: text to video on the embedded default model, image to video on the shipped
# image-to-video default (the text encoder and VAE files serve both).
write comfy-core fastvideo_translator_comfy_core '[]'
write comfy-wan fastvideo_translator_comfy_wan '[]'
write comfy-kjnodes fastvideo_translator_comfy_kjnodes '[]'
write comfy-flux2 fastvideo_translator_comfy_flux2 '[]'
write comfy-qwenimage fastvideo_translator_comfy_qwenimage '[]'
write comfy-ltx2 fastvideo_translator_comfy_ltx2 '[]'
{
  cat "$out/comfy-core.toml" "$out/comfy-wan.toml" "$out/comfy-kjnodes.toml" "$out/comfy-flux2.toml" "$out/comfy-qwenimage.toml" \
    "$out/comfy-ltx2.toml"
  echo
  echo "[workflows.models]"
  echo "\"wan2.1_t2v_1.3B_fp16.safetensors\" = \"default\""
  echo "\"wan2.1_i2v_480p_14B_fp16.safetensors\" = \"default-i2v\""
  echo "\"clip_vision_h.safetensors\" = \"default-i2v\""
  for f in umt5_xxl_fp8_e4m3fn_scaled.safetensors wan_2.1_vae.safetensors; do
    echo "\"$f\" = [\"default\", \"default-i2v\"]"
  done
} > "$out/comfyui.toml"
echo "wrote $out/comfyui.toml"
