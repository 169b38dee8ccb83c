#!/usr/bin/env bash
# Installs ComfyUI's own command-line client, comfy-cli (pinned, from PyPI), into .venv-comfy,
# for the test that drives `fastvideo serve`'s ComfyUI API with `comfy run`. Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
want=1.23.0
if [ -x .venv-comfy/bin/comfy ] && .venv-comfy/bin/python -c "import importlib.metadata as m, sys; sys.exit(m.version('comfy-cli') != '$want')" 2>/dev/null; then
  exit 0
fi
rm -rf .venv-comfy
if python3 -m venv .venv-comfy 2>/dev/null && [ -x .venv-comfy/bin/pip ]; then
  .venv-comfy/bin/pip install -q --disable-pip-version-check "comfy-cli==$want"
else
  rm -rf .venv-comfy && mkdir -p .venv-comfy/bin
  python3 -m pip install -q --disable-pip-version-check --target .venv-comfy/site "comfy-cli==$want"
  printf '#!/bin/sh\nPYTHONPATH="%s/.venv-comfy/site${PYTHONPATH:+:$PYTHONPATH}" exec python3 "$@"\n' "$PWD" > .venv-comfy/bin/python
  printf '#!/bin/sh\nexec "%s" -c "import sys; from comfy_cli.__main__ import main; sys.argv[0] = \x27comfy\x27; sys.exit(main())" "$@"\n' "$PWD/.venv-comfy/bin/python" > .venv-comfy/bin/comfy
  chmod +x .venv-comfy/bin/python .venv-comfy/bin/comfy
fi
echo "comfy-cli $want in .venv-comfy"
