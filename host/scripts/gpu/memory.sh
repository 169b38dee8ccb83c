#!/usr/bin/env bash
# Device memory per phase, ours beside diffusers on the same work, one call (issue 54): a
# random-weight Wan2.1-T2V-1.3B folder (make_wan13b.py), seeded inputs as diffusers_bench.py
# writes them, then
#   ours       `fastvideo bench --json`: each phase's allocator peaks (forward, CFG step, batch-2
#              forward, text encode, VAE decode, tiny decode in chunks and in one pass, preview)
#              and the same-work peak; nvidia-smi polled over the whole process beside it
#   diffusers  diffusers_mem.py: the same phases of the same work, read the same way
#   human      the bench's human summary of the same run (fewer repetitions)
# and a table of the two (memory.md). Run from the repo root on the GPU machine, carrying
# .gpu-pack (fastvideo.xz, libfastvideo_graph.so, site.tar.xz: build_here.sh, then
# `xz -9 -T2 -c .gpu/fastvideo >.gpu-pack/fastvideo.xz` and pack_site.sh). When the tracked tree
# leaves too little of a call's 64 MiB for the pack, carry it over several calls to one warm
# machine (results/2026-12-06-memory/README.md shows how) and join the parts into fastvideo.xz.
#   env  MODEL=/tmp/wan13b  OUT=/tmp/out  FRAMES=81 HEIGHT=480 WIDTH=832  RUNS=2
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
MODEL="${MODEL:-/tmp/wan13b}"
OUT="${OUT:-/tmp/out}"
BIN="${FASTVIDEO_BIN:-.gpu/fastvideo}"
SIZE=(--frames "${FRAMES:-81}" --height "${HEIGHT:-480}" --width "${WIDTH:-832}")
S=host/scripts/gpu
mkdir -p "$OUT"
# shellcheck source=host/scripts/gpu/torch_env.sh
source host/scripts/gpu/torch_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f "$MODEL/model_index.json" ] || python3 "$S/make_wan13b.py" "$MODEL" --device cuda >"$OUT/make.txt" 2>&1
python3 - "$MODEL" "$OUT/inputs.safetensors" "${FRAMES:-81}" "${HEIGHT:-480}" "${WIDTH:-832}" <<'PY'
import json, os, sys
import torch
from safetensors.torch import save_file
model, out, frames, height, width = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
cfg = json.load(open(os.path.join(model, "transformer", "config.json")))
g = torch.Generator().manual_seed(0)  # diffusers_bench.py's --seed default, its draws in its order
shape = [1, cfg["in_channels"], (frames - 1) // 4 + 1, height // 8, width // 8]
save_file({"latents": torch.randn(shape, generator=g), "timestep": torch.tensor([500.0]),
           "context": torch.randn([1, 512, cfg["text_dim"]], generator=g),
           "vae_latents": torch.randn(shape, generator=g)}, out)
PY

smi_peak() { # file of nvidia-smi samples -> max MiB
  python3 -c 'import sys; m = [int(x) for x in open(sys.argv[1]).read().split() if x.isdigit()]; print(max(m) if m else "")' "$1"
}
with_smi() { # name, command...: runs it while sampling nvidia-smi every 200 ms into $OUT/name_smi.txt
  local name=$1 pid rc=0
  shift
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$OUT/${name}_smi.txt" &
  pid=$!
  "$@" || rc=$?
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  echo "$name: nvidia-smi peak $(smi_peak "$OUT/${name}_smi.txt") MiB, exit $rc"
  return "$rc"
}

ours() {
  "$BIN" bench --model "$MODEL" --device cuda --dtype bf16 "${SIZE[@]}" --runs "${RUNS:-2}" --vae-runs 1 \
    --inputs "$OUT/inputs.safetensors" --json >"$OUT/ours.json" 2>"$OUT/ours.log"
}
diffusers() {
  python3 "$S/diffusers_mem.py" --model "$MODEL" --inputs "$OUT/inputs.safetensors" --out "$OUT/diffusers_mem.json" \
    >"$OUT/diffusers_mem.log" 2>&1
}
with_smi ours ours
with_smi diffusers diffusers
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
o, d = json.load(open(f"{out}/ours.json")), json.load(open(f"{out}/diffusers_mem.json"))
smi = lambda n: max((int(x) for x in open(f"{out}/{n}_smi.txt").read().split() if x.isdigit()), default=None)
g = lambda b: "—" if b is None else f"{b / 2**30:.2f}"
dp = {p["phase"]: p for p in d["phase_memory"]}
gpu = open(f"{out}/gpu.txt").read().split(",")[0].strip()
rows = [f"{gpu}, torch {d['torch']}; 480x832x81 bf16, random-weight Wan2.1-T2V-1.3B; allocator view "
        f"(cache emptied, peaks reset before each phase); GiB", "",
        "| phase | ours peak allocated | ours peak reserved | ours at start | diffusers peak allocated "
        "| diffusers peak reserved | diffusers at start |", "|---|---|---|---|---|---|---|"]
for p in o["phase_memory"]:
    q = dp.get(p["phase"], {})
    rows.append(f"| {p['phase']} | {g(p['peak_allocated_bytes'])} | {g(p['peak_reserved_bytes'])} | "
                f"{g(p['start_allocated_bytes'])} | {g(q.get('peak_allocated_bytes'))} | "
                f"{g(q.get('peak_reserved_bytes'))} | {g(q.get('start_allocated_bytes'))} |")
rows.append(f"| same work (text encode, CFG step, VAE decode) | {g(o['same_work_peak_allocated_bytes'])} | "
            f"{g(o['same_work_peak_reserved_bytes'])} | | {g(d['same_work_peak_allocated_bytes'])} | "
            f"{g(d['same_work_peak_reserved_bytes'])} | |")
so, sd = smi("ours"), smi("diffusers")
rows += ["", f"nvidia-smi peak over the whole process: ours {g(so and so * 2**20)} GiB (every phase above, "
         f"tiny decoder and previews included), diffusers {g(sd and sd * 2**20)} GiB (its four phases)",
         f"tiny decoder ({o.get('tiny_decoder')}): chunks of {o.get('tiny_decode_chunk_frames')} latent frames "
         f"{o.get('tiny_decode_s')} s, one pass {o.get('tiny_decode_one_pass_s')} s",
         f"memory_view: {o['memory_view']}"]
open(f"{out}/memory.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
"$BIN" bench --model "$MODEL" --device cuda --dtype bf16 "${SIZE[@]}" --runs 1 --vae-runs 1 \
  --inputs "$OUT/inputs.safetensors" >"$OUT/ours_human.txt" 2>"$OUT/ours_human.log" || echo "human run: exit $?"
cat "$OUT/ours_human.txt"
