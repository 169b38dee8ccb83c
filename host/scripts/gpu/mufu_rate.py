"""Exponentials per clock on this GPU: ex2.approx.f32 against ex2.approx.f16x2 (and bf16x2).

Hopper's MUFU unit bounds the 8-bit attention kernel's softmax (kernels/cuda/attention8.cu); this
measures whether the packed half-precision form computes two exponentials for the price of one.
Each thread runs 8 independent chains x <- 2^-x (stable near 0.64), so the unit, not latency,
bounds it. Compiled with NVRTC and launched through the driver API (ctypes); torch only allocates
and times. Run on the GPU machine: python3 host/scripts/gpu/mufu_rate.py
"""

import ctypes
import glob
import os

import torch

SRC = r"""
extern "C" __global__ void f32(float* out, int n) {
    float x[8];
    for (int c = 0; c < 8; c++) x[c] = 0.1f * c + threadIdx.x * 1e-4f;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 8; c++) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x[c]) : "f"(-x[c]));
    float s = 0; for (int c = 0; c < 8; c++) s += x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
extern "C" __global__ void f16x2(float* out, int n) {
    unsigned x[8];
    for (int c = 0; c < 8; c++) x[c] = 0x38003800u + c + threadIdx.x;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 8; c++) {
            unsigned y = x[c] ^ 0x80008000u;  // -x
            asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(x[c]) : "r"(y));
        }
    unsigned s = 0; for (int c = 0; c < 8; c++) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = (float)s;
}
extern "C" __global__ void bf16x2(float* out, int n) {
    unsigned x[8];
    for (int c = 0; c < 8; c++) x[c] = 0x3f003f00u + c + threadIdx.x;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 8; c++) {
            unsigned y = x[c] ^ 0x80008000u;
            asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(x[c]) : "r"(y));
        }
    unsigned s = 0; for (int c = 0; c < 8; c++) s ^= x[c];
    out[blockIdx.x * blockDim.x + threadIdx.x] = (float)s;
}
"""


def lib(pattern):
    roots = [os.path.dirname(torch.__file__)] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    import site
    roots += site.getsitepackages()
    for r in roots:
        for p in glob.glob(os.path.join(r, "**", pattern), recursive=True):
            print("using", p)
            return ctypes.CDLL(p)
    raise SystemExit(f"{pattern} not found")


def main():
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    nvrtc = lib("libnvrtc.so*")
    cuda = ctypes.CDLL("libcuda.so.1")
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), SRC.encode(), b"m.cu", 0, None, None) == 0
    opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_90")
    if nvrtc.nvrtcCompileProgram(prog, 1, opts) != 0:
        n = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise SystemExit(log.value.decode())
    n = ctypes.c_size_t()
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(n))
    ptx = ctypes.create_string_buffer(n.value)
    nvrtc.nvrtcGetPTX(prog, ptx)
    mod = ctypes.c_void_p()
    err = cuda.cuModuleLoadData(ctypes.byref(mod), ptx)
    if err:
        raise SystemExit(f"cuModuleLoadData: CUDA error {err}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    blocks, threads, iters = sms * 8, 256, 4096
    out = torch.empty(blocks * threads, device="cuda")
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    res = {}
    for name, per in [("f32", 1), ("f16x2", 2), ("bf16x2", 2)]:
        fn = ctypes.c_void_p()
        assert cuda.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()) == 0
        p_out = ctypes.c_void_p(out.data_ptr())
        p_n = ctypes.c_int(iters)
        args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(p_out), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(p_n), ctypes.c_void_p))
        best = None
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            assert cuda.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, stream, args, None) == 0
            b.record()
            torch.cuda.synchronize()
            t = a.elapsed_time(b) / 1e3
            best = t if best is None else min(best, t)
        exps = blocks * threads * iters * 8 * per
        res[name] = exps / best
        print(f"{name:7s} {best * 1e3:8.3f} ms  {exps / best / 1e12:6.2f} T exponentials/s"
              f"  ({exps / best / sms / 1.98e9:5.1f} per SM per clock at 1.98 GHz)")
    print(f"f16x2 / f32 exponentials per second: {res['f16x2'] / res['f32']:.2f}; "
          f"bf16x2 / f32: {res['bf16x2'] / res['f32']:.2f}")


if __name__ == "__main__":
    main()
