#!/usr/bin/env bash
# Run HERE (the CPU build machine, no GPU or CUDA toolkit needed): builds
# .gpu-pack/libfastvideo_graph.so from kernels/cpp/cuda_graph.cpp — the C shim through which our
# binary captures and replays CUDA graphs of libtorch work (at::cuda::CUDAGraph) on the GPU
# machine, whose PyTorch is 2.11.0+cu130 and which has no compiler.
#
# Inputs, all from PyPI (cached in the git-ignored wheel cache that bootstrap.sh uses):
#   .libtorch/include        libtorch 2.11.0 headers (bootstrap.sh, from the torch==2.11.0 wheel)
#   nvidia-cuda-runtime      13.0.96 (what torch 2.11.0+cu130 depends on): cuda_runtime_api.h,
#                            driver_types.h, ... which c10/cuda and ATen/cuda headers include
#   nvidia-cuda-crt          13.0.88: crt/host_config.h etc., included by cuda_runtime.h (CUDA 13
#                            moved them out of the runtime wheel)
# The torch 2.11 wheels use the C++11 std::string ABI (libc10.so exports std::__cxx11 symbols),
# hence -D_GLIBCXX_USE_CXX11_ABI=1.
#
# Linking — the torch/CUDA libraries are not on this machine (and need not be): we link against
# empty stub .so files that only carry the real sonames (libtorch_cuda.so, libc10_cuda.so,
# libc10.so, libcudart.so.13), so the shim gets DT_NEEDED entries by name and its C++ symbols are
# left undefined for the loader. At dlopen time glibc matches each DT_NEEDED name against the
# sonames of libraries already loaded — our binary has loaded libtorch_cpu (-> libc10,
# libcudart) and dlopened libtorch_cuda (-> libc10_cuda) — so no search path is involved; if one
# is not loaded, the loader finds it on LD_LIBRARY_PATH (torch_env.sh puts torch/lib and
# nvidia/*/lib there) or dlopen fails with a readable "cannot open shared object" message.
# This beats relying on RTLD_GLOBAL alone: symbols then resolve through the shim's own
# dependency scope, whether or not libtorch_cuda was opened RTLD_GLOBAL. -z now binds every
# symbol at dlopen, so an ABI mismatch is a dlopen error rather than a crash mid-capture.
# No rpath: the loaded libraries or LD_LIBRARY_PATH provide everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
root="$PWD"

bash host/scripts/bootstrap.sh  # .libtorch/include (a no-op when already there)

cache="${FASTVIDEO_WHEEL_CACHE:-$root/.libtorch-wheels}"
hdr="$cache/cuda-headers-13.0"
if [ ! -f "$hdr/.complete" ]; then
  mkdir -p "$cache"
  echo "build_graph_shim: fetching CUDA 13.0 headers from PyPI into $cache" >&2
  python3 -m pip download --quiet --no-deps -d "$cache" \
    'nvidia-cuda-runtime==13.0.96' 'nvidia-cuda-crt==13.0.88'
  rm -rf "$hdr.tmp" && mkdir -p "$hdr.tmp"
  python3 - "$hdr.tmp" "$cache"/nvidia_cuda_runtime-13.0.96-*.whl "$cache"/nvidia_cuda_crt-13.0.88-*.whl <<'PY'
import os, sys, zipfile
out, *wheels = sys.argv[1:]
prefix = "nvidia/cu13/include/"
for w in wheels:
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            if n.startswith(prefix) and not n.endswith("/"):
                dst = os.path.join(out, n[len(prefix):])
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                with open(dst, "wb") as f:
                    f.write(z.read(n))
PY
  test -f "$hdr.tmp/cuda_runtime_api.h" && test -f "$hdr.tmp/crt/host_config.h"
  touch "$hdr.tmp/.complete"
  rm -rf "$hdr" && mv "$hdr.tmp" "$hdr"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/stubs"
for so in libtorch_cuda.so libc10_cuda.so libc10.so libcudart.so.13; do
  gcc -shared -fPIC -x c /dev/null -o "$work/stubs/$so" -Wl,-soname,"$so"
done

mkdir -p .gpu-pack
g++ -O2 -std=c++17 -shared -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 -fvisibility=hidden -fvisibility-inlines-hidden \
  -isystem .libtorch/include -isystem "$hdr" \
  kernels/cpp/cuda_graph.cpp -o "$work/libfastvideo_graph.so" \
  -Wl,-soname,libfastvideo_graph.so -Wl,-z,now -Wl,--no-as-needed \
  "$work/stubs/libtorch_cuda.so" "$work/stubs/libc10_cuda.so" "$work/stubs/libc10.so" \
  "$work/stubs/libcudart.so.13"
strip --strip-unneeded "$work/libfastvideo_graph.so"

# Every entry point must be exported, or the Rust side's dlsym fails on the GPU machine.
for f in fv_graph_version fv_graph_torch_version fv_graph_begin fv_graph_end fv_graph_replay fv_graph_free fv_current_stream fv_memory_stats fv_memory_reset_peak; do
  nm -D --defined-only "$work/libfastvideo_graph.so" | grep -qw "T $f" \
    || { echo "build_graph_shim: $f not exported" >&2; exit 1; }
done
mv "$work/libfastvideo_graph.so" .gpu-pack/libfastvideo_graph.so
echo "build_graph_shim: .gpu-pack/libfastvideo_graph.so $(stat -c %s .gpu-pack/libfastvideo_graph.so) bytes" >&2
