#!/usr/bin/env bash
# The fleet test: NVIDIA Dynamo's frontend (PyPI) and two fastvideo-dynamo workers on loopback,
# driven by the official `openai` client (tests/dynamo/e2e.py). Installs what it needs: Dynamo's
# Python frontend and the client (PyPI, .venv-dynamo), and builds the worker (the workspace's
# own build: after `cargo test --workspace`, a link). The worker's unit tests run with the
# workspace's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# FASTVIDEO_DYNAMO: a worker binary already built (test.sh passes the one its test build made).
bash host/scripts/dynamo-venv.sh
worker="${FASTVIDEO_DYNAMO:-}"
if [ -z "$worker" ] || [ ! -x "$worker" ]; then
  worker=$(bash host/scripts/dynamo-worker.sh | tail -n1)
fi
FASTVIDEO_DYNAMO="$worker" .venv-dynamo/bin/python tests/dynamo/e2e.py
