#!/usr/bin/env python3
"""Prints (and writes to OUT/table.md) our binary's timings next to diffusers'.

    python3 compare.py --dir OUT

Reads OUT/diffusers.json (diffusers_bench.py), OUT/ours.json and any OUT/ours_<name>.json (one
JSON object each, printed by `fastvideo bench --json`), and the velocities OUT/ref_fp32.safetensors,
OUT/ours_velocity.safetensors and OUT/ours_<name>_velocity.safetensors. Missing numbers print "—".
Figures marked ~ are estimates (2 forwards per CFG step, steps x CFG step per clip), not runs.
"""
import argparse
import glob
import json
import os
import re

P = argparse.ArgumentParser()
P.add_argument("--dir", required=True)
A = P.parse_args()
GIB = 2 ** 30


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:  # a failed run leaves an empty or partial file
        print(f"compare: {path}: {e}; its figures print as —")
        return {}


def rel_err(path, ref):
    if ref is None or not os.path.exists(path):
        return None
    import numpy as np
    from safetensors.numpy import load_file
    v = load_file(path)["velocity"].astype(np.float64)
    if v.shape != ref.shape:
        print(f"compare: {path}: velocity shape {v.shape} != reference {ref.shape}")
        return None
    return float(np.linalg.norm(v - ref) / np.linalg.norm(ref))


d = load_json(os.path.join(A.dir, "diffusers.json"))
ours = {"ours": load_json(os.path.join(A.dir, "ours.json"))}
for p in sorted(glob.glob(os.path.join(A.dir, "ours_*.json"))):
    ours[re.sub(r"^ours_|\.json$", "", os.path.basename(p))] = load_json(p)
ref_path = os.path.join(A.dir, "ref_fp32.safetensors")
ref = None
if os.path.exists(ref_path):
    from safetensors.numpy import load_file
    ref = load_file(ref_path)["velocity"].astype("float64")
for name, o in ours.items():
    vel = "ours_velocity.safetensors" if name == "ours" else f"ours_{name}_velocity.safetensors"
    o.setdefault("rel_err", rel_err(os.path.join(A.dir, vel), ref))

steps = int(d.get("clip_steps") or 50)


def mul(x, k):
    return None if x is None else ("~", x * k)


def ours_cfg(o):
    if o.get("cfg_step_s") is not None:
        return o["cfg_step_s"]
    return mul(o.get("forward_s"), 2)


def ours_clip(o):
    if o.get("clip_denoise_s") is not None:
        return o["clip_denoise_s"]
    c = ours_cfg(o)
    return None if c is None else ("~", (c[1] if isinstance(c, tuple) else c) * steps)


def gib(x):
    return None if x is None else x / GIB


def dclip(eager):
    if eager and d.get("clip_denoise_s") is not None:
        return d["clip_denoise_s"]
    f = d.get("bf16_eager_forward_s" if eager else "bf16_compile_forward_s")
    return mul(f, 2 * steps)


dm = {}
if os.path.exists(os.path.join(A.dir, "diffusers_mem.json")):
    dm = json.load(open(os.path.join(A.dir, "diffusers_mem.json")))


def phase_of(o, name):
    """One phase's memory record from a report's `phase_memory` (the bench's or diffusers_mem.py's)."""
    return next((p for p in o.get("phase_memory") or [] if p.get("phase") == name), {})


def phase_peak(name, key):
    return lambda o: gib(phase_of(o, name).get(key))


vae_dtype = "bf16"  # which diffusers VAE figure our vae_decode_s sits next to
rows = [  # label, ours(o) -> value, diffusers eager bf16, diffusers compile bf16, ratios?
    ("transformer forward (s)", lambda o: o.get("forward_s"), d.get("bf16_eager_forward_s"),
     d.get("bf16_compile_forward_s"), True),
    ("CFG step = 2 forwards (s)", ours_cfg, d.get("clip_step_s") or mul(d.get("bf16_eager_forward_s"), 2),
     mul(d.get("bf16_compile_forward_s"), 2), True),
    (f"{steps}-step clip denoise (s)", ours_clip, dclip(True), dclip(False), True),
    ("text encode, 512 tokens (s)", lambda o: o.get("text_encode_s"), d.get("text_encode_s"), None, True),
    ("VAE decode, bf16 (s)", lambda o: o.get("vae_decode_s") if o.get("vae_dtype", vae_dtype) == "bf16" else None,
     d.get("vae_decode_bf16_s"), None, True),
    ("VAE decode, fp32 (s)", lambda o: o.get("vae_decode_s") if o.get("vae_dtype", vae_dtype) == "fp32" else None,
     d.get("vae_decode_fp32_s"), None, True),
    ("load (s; diffusers: transformer only)", lambda o: o.get("load_s"), d.get("bf16_load_s"), None, True),
    *[(f"peak allocated, {ph} alone (GiB; diffusers: diffusers_mem.py)", phase_peak(ph, "peak_allocated_bytes"),
       gib(phase_of(dm, ph).get("peak_allocated_bytes")), None, True)
      for ph in ("forward", "cfg_step", "vae_decode")],
    ("peak allocated, same work: text encode + CFG step + VAE decode (GiB)",
     lambda o: gib(o.get("same_work_peak_allocated_bytes")), gib(dm.get("same_work_peak_allocated_bytes")), None, True),
    ("peak reserved, same work (GiB)",
     lambda o: gib(o.get("same_work_peak_reserved_bytes")), gib(dm.get("same_work_peak_reserved_bytes")), None, True),
    ("nvidia-smi peak, whole process (GiB; ours adds tiny decoder, previews, batch-2 forward: not the same work)",
     lambda o: None if o.get("peak_gpu_smi_mib") is None else o["peak_gpu_smi_mib"] / 1024,
     None if dm.get("peak_gpu_smi_mib") is None else dm["peak_gpu_smi_mib"] / 1024, None, False),
    ("velocity rel err vs fp32", lambda o: o.get("rel_err"), d.get("bf16_eager_rel_err"),
     d.get("bf16_compile_rel_err"), False),
]


def val(x):
    return x[1] if isinstance(x, tuple) else x


def fmt(x):
    if x is None:
        return "—"
    est, v = ("~", x[1]) if isinstance(x, tuple) else ("", x)
    return est + (f"{v:.2e}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}" if v < 100 else f"{v:.1f}")


def ratio(a, b):
    a, b = val(a), val(b)
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


names = list(ours)
head = names + ["diffusers eager bf16", "diffusers compile bf16"]
head += [f"{n}/eager" for n in names] + [f"{n}/compile" for n in names]
title = (f"diffusers on {d.get('gpu', '?')}, torch {d.get('torch', '?')}; "
         f"{d.get('frames', '?')}x{d.get('height', '?')}x{d.get('width', '?')}; ~ = estimated, not run")
lines = [title, "",
         "| | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
for label, f, eager, comp, ratios in rows:
    vals = [f(ours[n]) for n in names]
    cells = [fmt(v) for v in vals] + [fmt(eager), fmt(comp)]
    cells += [ratio(v, eager) if ratios else "—" for v in vals] + [ratio(v, comp) if ratios else "—" for v in vals]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
extra = {k: d.get(k) for k in ("compile_s", "fp32_forward_s", "bf16_sdpa_cudnn_forward_s", "bf16_sdpa_flash_forward_s",
                              "bf16_sdpa_efficient_forward_s", "vae_bf16_psnr_db", "clip_total_s")}
lines += ["", "diffusers also: " + ", ".join(f"{k} {fmt(v)}" for k, v in extra.items())]
table = "\n".join(lines) + "\n"
print(table, end="")
with open(os.path.join(A.dir, "table.md"), "w") as f:
    f.write(table)
