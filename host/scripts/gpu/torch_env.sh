# Sourced by the GPU scripts (from the repo root on the GPU machine): installs the pinned wheels in
# .whl/ (or .gpu-pack/site.tar.xz) aside into /tmp/site (once; again when a wheel is newer) and
# points our binary, which links only libtorch's CPU part and dlopens the CUDA part, at the machine's PyTorch libraries
# (torch/lib, and the CUDA/cuDNN/NCCL wheels under site-packages/nvidia).
# Or the same wheels as one tarball of their files (pack_site.sh), which is a third of their size.
if [ -f .gpu-pack/site.tar.xz ] && { [ ! -f /tmp/site/.fastvideo-wheels ] || [ .gpu-pack/site.tar.xz -nt /tmp/site/.fastvideo-wheels ]; }; then
  mkdir -p /tmp/site && tar -C /tmp/site -xJf .gpu-pack/site.tar.xz
  touch /tmp/site/.fastvideo-wheels
fi
if [ -d .whl ] && { [ ! -f /tmp/site/.fastvideo-wheels ] || [ -n "$(find .whl -name '*.whl' -newer /tmp/site/.fastvideo-wheels)" ]; }; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  touch /tmp/site/.fastvideo-wheels
fi
# Our binary, carried as .gpu-pack/fastvideo.xz: unpacked into $BIN when missing or older than the
# pack (a warm machine keeps .gpu/ from an earlier call).
BIN="${BIN:-${FASTVIDEO_BIN:-.gpu/fastvideo}}"
if [ -f .gpu-pack/fastvideo.xz ] && { [ ! -x "$BIN" ] || [ .gpu-pack/fastvideo.xz -nt "$BIN" ]; }; then
  mkdir -p "$(dirname "$BIN")" && xz -dc .gpu-pack/fastvideo.xz >"$BIN" && chmod +x "$BIN"
fi
# The CUDA-graph library (build_graph_shim.sh) goes beside the binary, where it looks for it.
if [ -f .gpu-pack/libfastvideo_graph.so ] && [ -d "$(dirname "$BIN")" ]; then
  cp -p .gpu-pack/libfastvideo_graph.so "$(dirname "$BIN")/"
fi
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
FASTVIDEO_TORCH_LIBS="$(python3 -c 'import glob, os, torch
d = [os.path.dirname(torch.__file__) + "/lib"]
try:
    import nvidia
    for n in nvidia.__path__: d += glob.glob(n + "/cu13/lib") + sorted(glob.glob(n + "/*/lib"))
except ImportError:
    pass
print(":".join(dict.fromkeys(d)))')"
export LD_LIBRARY_PATH="$FASTVIDEO_TORCH_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# NCCL ships as libnccl.so.2 only; cudarc (the multi-GPU exchanges) opens libnccl.so.
if ! ls $(echo "$FASTVIDEO_TORCH_LIBS" | tr ':' ' ' | sed 's|\([^ ]*\)|\1/libnccl.so|g') >/dev/null 2>&1; then
  for d in $(echo "$FASTVIDEO_TORCH_LIBS" | tr ':' ' '); do
    if [ -f "$d/libnccl.so.2" ]; then
      mkdir -p /tmp/fastvideo-nccl && ln -sf "$d/libnccl.so.2" /tmp/fastvideo-nccl/libnccl.so
      export LD_LIBRARY_PATH="/tmp/fastvideo-nccl:$LD_LIBRARY_PATH"
      break
    fi
  done
fi
