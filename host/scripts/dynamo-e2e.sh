#!/usr/bin/env bash
# The fleet test: NVIDIA Dynamo's frontend (PyPI) and two fastvideo workers on loopback, driven
# by the official `openai` client (tests/dynamo/e2e.py). Installs what it needs: protoc
# (Debian), Dynamo's Python frontend and the client (PyPI, .venv-dynamo), and builds the worker.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
bash host/scripts/dynamo-venv.sh
worker=$(bash host/scripts/dynamo-worker.sh | tail -n1)
# The worker's own tests (protocol mapping), on the release build just made.
(cd host/dynamo && CARGO_TARGET_DIR="$PWD/target" cargo test --release --locked)
FASTVIDEO_DYNAMO="$worker" .venv-dynamo/bin/python tests/dynamo/e2e.py
