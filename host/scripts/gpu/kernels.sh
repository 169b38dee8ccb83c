#!/usr/bin/env bash
# Run on the GPU machine from the repo root: the fused kernels against their tch fallbacks
# (kernels/tests/parity.rs, carried as .gpu/kernels-parity by build_here.sh).
set -euo pipefail
torch_lib=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')
nv_lib=$(python3 -c 'import os, nvidia; print(os.path.dirname(nvidia.__path__[0] + "/x") + "/cu13/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH="$torch_lib:$nv_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
FASTVIDEO_LOG=${FASTVIDEO_LOG:-info} .gpu/kernels-parity --nocapture --test-threads 1
