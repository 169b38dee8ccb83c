#!/usr/bin/env python3
"""Compiles a CUDA source of kernels/cuda with NVRTC, as the runtime does, then assembles the PTX
with ptxas for a real GPU to show registers, spills and shared memory per kernel. Runs on a
machine without a GPU: NVRTC and ptxas come from the reference venv's torch wheels
(`.venv`, see tests/fixtures/requirements.txt).

    .venv/bin/python host/scripts/cuda_check.py --arch 90a kernels/cuda/attention8.cu
"""
import argparse
import ctypes
import glob
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find(pattern):
    hits = sorted(glob.glob(os.path.join(ROOT, ".venv/lib/python3*/site-packages", pattern)))
    if not hits:
        sys.exit(f"not found under .venv: {pattern} (create it: python3 -m venv .venv && "
                 ".venv/bin/pip install -r tests/fixtures/requirements.txt)")
    return hits[-1]


def nvrtc_compile(src, name, arch):
    # NVRTC opens its builtins by soname at compile time: load them first.
    ctypes.CDLL(find("nvidia/cu13/lib/libnvrtc-builtins.so.13.0"), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(find("nvidia/cu13/lib/libnvrtc.so.13"), mode=ctypes.RTLD_GLOBAL)
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
    assert rc == 0, f"nvrtcCreateProgram: {rc}"
    opts = [f"--gpu-architecture=compute_{arch}".encode(), b"--std=c++17"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if log.value.strip():
        print(log.value.decode(), file=sys.stderr)
    if rc != 0:
        sys.exit(f"NVRTC failed ({rc})")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, ptx)
    return ptx.value.decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="90a", help="compute capability, e.g. 90a, 89, 80")
    ap.add_argument("--ptx", help="also write the PTX here")
    ap.add_argument("sources", nargs="+", help="CUDA sources, concatenated in this order")
    a = ap.parse_args()
    src = "".join(open(p).read() for p in a.sources)
    ptx = nvrtc_compile(src, os.path.basename(a.sources[-1]), a.arch)
    if a.ptx:
        open(a.ptx, "w").write(ptx)
    ptxas = find("torch/bin/ptxas")
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.ptx")
        open(p, "w").write(ptx)
        r = subprocess.run([ptxas, f"-arch=sm_{a.arch}", "-v", "-o", os.path.join(d, "k.cubin"), p],
                           capture_output=True, text=True)
    print(r.stdout + r.stderr)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
