#!/usr/bin/env bash
# Fetches the pinned ComfyUI workflow template corpus (PyPI `comfyui-workflow-templates-json`)
# into .comfy-corpus/VERSION/templates, for the workflow tests and `fastvideo workflow coverage`.
# Idempotent; prints the templates folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
version=0.1.123
dest=.comfy-corpus/$version
if [ ! -f "$dest/.complete" ]; then
  rm -rf "$dest" && mkdir -p "$dest"
  py=python3
  [ -x .venv-client/bin/python ] && py=.venv-client/bin/python
  "$py" -m pip download -q --disable-pip-version-check --no-deps \
    "comfyui-workflow-templates-json==$version" -d "$dest/wheel" >&2
  "$py" - "$dest" <<'PY'
import glob, os, sys, zipfile
dest = sys.argv[1]
(wheel,) = glob.glob(os.path.join(dest, "wheel", "*.whl"))
prefix = "comfyui_workflow_templates_json/templates/"
os.makedirs(os.path.join(dest, "templates"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rest = name[len(prefix):]
        if name.startswith(prefix) and rest.endswith(".json") and "/" not in rest:
            with open(os.path.join(dest, "templates", rest), "wb") as f:
                f.write(z.read(name))
PY
  touch "$dest/.complete"
fi
echo "$PWD/$dest/templates"
