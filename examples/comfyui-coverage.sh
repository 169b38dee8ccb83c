#!/usr/bin/env bash
# Reproduces docs/comfyui-coverage.md: the pinned ComfyUI template corpus (PyPI
# comfyui-workflow-templates-json) against the first-party translators.
#   bash examples/comfyui-coverage.sh            # writes docs/comfyui-coverage.md
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fv="${FASTVIDEO:-$root/target/release/fastvideo}"
[ -x "$fv" ] || cargo build --release -p fastvideo
corpus=$(bash host/scripts/comfy-corpus.sh)
deploys=$(mktemp -d)
FASTVIDEO="$fv" bash examples/plugins-deploy.sh "$deploys" >/dev/null
{
  echo "# ComfyUI template coverage"
  echo
  echo "The 644 workflows of PyPI \`comfyui-workflow-templates-json\` 0.1.123 against the first-party"
  echo "translator packs (core, Wan, KJNodes, FLUX.2, Qwen-Image, LTX-2), with the model files of the Wan 2.1 text- and image-to-video"
  echo "templates mapped to the default models (\`deploys/comfyui.toml\`). Made by"
  echo "\`bash examples/comfyui-coverage.sh\`; see [comfyui.md](comfyui.md)."
  echo
  "$fv" workflow coverage "$corpus" --deploy "$deploys/comfyui.toml" --top 40
} > docs/comfyui-coverage.md
rm -rf "$deploys"
echo "wrote docs/comfyui-coverage.md"
