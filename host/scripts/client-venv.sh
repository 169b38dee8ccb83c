#!/usr/bin/env bash
# Installs the official `openai` Python client and componentize-py (pinned, from PyPI) into
# .venv-client, for the server tests, examples/clients/ and the Python plugin test.
# Idempotent; falls back to `pip --target` plus a wrapper when the venv module is missing
# (Debian without python3-venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
want="openai==3.57.0 websockets==17.4 componentize-py==0.25.1"
py=.venv-client/bin/python
if [ -x "$py" ] && "$py" -c 'import openai, sys; sys.exit(openai.__version__ != "3.57.0")' 2>/dev/null \
  && [ "$(.venv-client/bin/componentize-py --version 2>/dev/null)" = "componentize-py 0.25.1" ]; then
  exit 0
fi
rm -rf .venv-client
if python3 -m venv .venv-client 2>/dev/null && [ -x .venv-client/bin/pip ]; then
  .venv-client/bin/pip install -q --disable-pip-version-check $want
else
  rm -rf .venv-client && mkdir -p .venv-client/bin
  python3 -m pip install -q --disable-pip-version-check --target .venv-client/site $want
  printf '#!/bin/sh\nPYTHONPATH="%s/.venv-client/site${PYTHONPATH:+:$PYTHONPATH}" exec python3 "$@"\n' "$PWD" > "$py"
  printf '#!/bin/sh\nexec "%s" -c "import sys; from componentize_py import script; sys.argv[0] = \x27componentize-py\x27; sys.exit(script())" "$@"\n' "$PWD/$py" > .venv-client/bin/componentize-py
  chmod +x "$py" .venv-client/bin/componentize-py
fi
"$py" -c 'import openai; print("openai client", openai.__version__)'
.venv-client/bin/componentize-py --version
