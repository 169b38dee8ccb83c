#!/usr/bin/env bash
# Run on a machine with PyPI (not the GPU machine, which has no network): downloads into .whl/
# the wheels the GPU machine lacks so that diffusers 0.42.1 imports there. bench.sh installs them
# with --no-index --no-deps. The GPU machine already has torch 2.11.0+cu130, transformers 5.x,
# huggingface-hub, safetensors, numpy, pillow, regex, requests, filelock, zipp, packaging, pyyaml.
#   diffusers          the library under test (pure python)
#   importlib_metadata in diffusers' Requires-Dist, not on the GPU machine (pure python)
#   accelerate, psutil what `pip install diffusers[torch]` adds; without accelerate diffusers'
#                      from_pretrained falls back to a slow full random init before loading
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
dest="$root/.whl"
mkdir -p "$dest"
# The GPU machine runs CPython 3.12 on x86-64 Linux; ask for wheels for it, whatever runs here.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d "$dest" \
  diffusers==0.42.1 importlib_metadata==8.7.0 accelerate==1.15.0 psutil==7.2.2
# Anything diffusers requires that is neither fetched above nor known to be on the GPU machine
# would make the import fail there: list its Requires-Dist so a new dependency is noticed here.
python3 - "$dest" <<'PY'
import glob, re, sys, zipfile
dest = sys.argv[1]
have = {"filelock", "huggingface-hub", "numpy", "regex", "requests", "safetensors", "pillow",
        "importlib-metadata", "zipp", "packaging", "pyyaml", "torch", "psutil"}
whl = glob.glob(f"{dest}/diffusers-0.42.1-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
missing = []
for line in meta.splitlines():
    if line.startswith("Requires-Dist:") and "extra ==" not in line:
        name = re.split(r"[<>=!;\s\[]", line.split(":", 1)[1].strip())[0].lower().replace("_", "-")
        if name not in have:
            missing.append(name)
if missing:
    sys.exit(f"fetch_wheels: diffusers requires {missing}, not fetched and not known on the GPU machine")
PY
ls -l "$dest"
du -sh "$dest"
