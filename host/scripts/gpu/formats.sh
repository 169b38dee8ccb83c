#!/usr/bin/env bash
# Weight formats at real size, one call: a random-weight Wan 14B transformer (the shape of
# Wan2.1-T2V-14B and of each Wan2.2-A14B expert) with its linears dense (bf16), FP8
# (--fp8-linears) and in GGUF blocks kept on the device (Q8_0, Q4_K by default), per forward, per
# CFG step, weight bytes and peak device memory, on the same inputs; and the GGUF decode kernel
# against the host decoder (float32 bit for bit, bf16 as the host's rounding) with its throughput.
# Run from the repo root on the GPU machine with the binary at ${FASTVIDEO_BIN:-.gpu/fastvideo}
# (or .gpu-pack/fastvideo.xz).
#   env  SHAPE=wan-14b  FRAMES=81 HEIGHT=480 WIDTH=832  FORMATS=dense,fp8,q8_0,q4_k  RUNS=2
#        OUT=/tmp/formats-out
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
OUT="${OUT:-/tmp/formats-out}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$BIN" bench-formats --device cuda --shape "${SHAPE:-wan-14b}" --frames "${FRAMES:-81}" --height "${HEIGHT:-480}" \
  --width "${WIDTH:-832}" --formats "${FORMATS:-dense,fp8,q8_0,q4_k}" --runs "${RUNS:-2}" >"$OUT/formats.json"
python3 - "$OUT/formats.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['device']} {r['dtype']} tokens {r['tokens']} kernels {r['kernels']}")
dense = next((x for x in r["rows"] if x["format"] == "dense"), None)
print("| format | linear weights GiB | forward s | vs dense | CFG step s | peak allocated GiB (forward) |")
print("| --- | --- | --- | --- | --- | --- |")
for x in r["rows"]:
    peak = next((m["peak_allocated_bytes"] for m in x["memory"] if m["phase"] == "forward"), None)
    ratio = x["forward_s"] / dense["forward_s"] if dense else float("nan")
    print(f"| {x['format']} | {x['linear_weight_bytes'] / 2**30:.2f} | {x['forward_s']:.3f} | {ratio:.3f} | "
          f"{x['cfg_step_s']:.3f} | {(peak or 0) / 2**30:.2f} |")
for d in r["decode"]:
    print(f"decode {d['format']}: f32 max diff {d['f32_max_abs_diff']:.1e}, bf16 max diff {d['bf16_max_abs_diff']:.1e}, "
          f"{d['decode_bf16_s'] * 1e3:.3f} ms per 13824x5120 weight ({d['decode_bf16_bytes_per_s'] / 1e9:.0f} GB/s written)")
PY
