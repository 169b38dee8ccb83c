#!/usr/bin/env bash
# Installs NVIDIA Dynamo's Python frontend (PyPI, pinned) and the official `openai` client into
# .venv-dynamo, for the fleet test. `ai-dynamo` 1.6.1 depends on `aisimulate`, a stub whose
# build fetches from NVIDIA's own index (unreachable from CI); the frontend does not use it,
# so `ai-dynamo` is installed without dependencies and the few the frontend imports are added.
# Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=.venv-dynamo/bin/python
if [ -x "$py" ] && "$py" -c 'import importlib.metadata as m, sys; sys.exit(m.version("ai-dynamo") != "1.6.1")' 2>/dev/null \
  && "$py" -c 'import openai, dynamo.frontend' 2>/dev/null; then
  exit 0
fi
rm -rf .venv-dynamo
python3 -m venv .venv-dynamo
pip() { .venv-dynamo/bin/pip install -q --disable-pip-version-check "$@"; }
pip ai-dynamo-runtime==1.6.1 openai==3.57.0
pip --no-deps ai-dynamo==1.6.1
pip packaging pyyaml msgspec
"$py" -c 'import openai, dynamo.frontend; print("dynamo frontend 1.6.1, openai", openai.__version__)'
