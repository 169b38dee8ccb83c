// CUDA-graph capture/replay of libtorch work, as a tiny C ABI for the Rust binary.
//
// Why a C++ shim: at::cuda::CUDAGraph is a C++ class in libtorch_cuda (no C API), and capture
// must go through it (not raw cudaStreamBeginCapture) so torch's caching allocator routes
// allocations made during capture into the graph's private memory pool and keeps them alive for
// replay. Built by host/scripts/gpu/build_graph_shim.sh against torch 2.11.0+cu130 headers; the
// process must have loaded libtorch_cuda.so before dlopening this library.
//
// Threading: torch's "current stream" is thread-local, and capture uses
// cudaStreamCaptureModeThreadLocal, so fv_graph_begin / the captured work / fv_graph_end must
// all run on one thread. Graphs are replayed on whatever stream is current at replay time.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/headeronly/version.h>

#include <cstring>
#include <exception>
#include <memory>
#include <optional>

// Built with -fvisibility=hidden: only the fv_* entry points are exported, so the inline torch
// code instantiated here (CUDAGuardImpl vtable, ...) stays private and cannot interpose.
#define FV_EXPORT __attribute__((visibility("default")))

namespace {

struct FvGraph {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::optional<c10::cuda::CUDAStream> prev;  // stream that was current before begin
  std::optional<c10::cuda::CUDAStream> side;  // capture stream (torch refuses the default one)
  // Holds the side stream as current (and its device as current device) during capture;
  // its destructor restores both. Non-movable, hence optional + emplace.
  std::optional<c10::cuda::CUDAStreamGuard> guard;
};

void set_err(char* err, size_t err_len, const char* msg) {
  if (!err || err_len == 0) return;
  std::strncpy(err, msg ? msg : "unknown error", err_len - 1);
  err[err_len - 1] = '\0';
}

// Runs f, turning any C++ exception into (non-zero return, message). c10::Error's what()
// carries a long C++ backtrace, so take the short form.
template <class F>
int guarded(char* err, size_t err_len, F&& f) {
  try {
    f();
    if (err && err_len) err[0] = '\0';
    return 0;
  } catch (const c10::Error& e) {
    set_err(err, err_len, e.what_without_backtrace());
  } catch (const std::exception& e) {
    set_err(err, err_len, e.what());
  } catch (...) {
    set_err(err, err_len, "unknown C++ exception");
  }
  return 1;
}

// `waiter` waits (on the GPU) for the work queued so far on `signaler`, as torch's
// Stream.wait_stream does: record an event on one, make the other wait on it.
void wait_stream(const c10::cuda::CUDAStream& waiter, const c10::cuda::CUDAStream& signaler) {
  c10::cuda::CUDAEvent ev;  // timing disabled by default
  ev.record(signaler);
  ev.block(waiter);
}

}  // namespace

extern "C" {

FV_EXPORT int fv_graph_version(void) { return 1; }

// The libtorch these headers came from, as major * 100 + minor (2.11 -> 211): CUDAGraph's layout
// is libtorch's, so the binary refuses a shim built against another minor version.
FV_EXPORT int fv_graph_torch_version(void) { return TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR; }

// device: CUDA ordinal, or -1 for the current device. pool_from: an earlier, already-ended
// graph whose private memory pool this capture shares (replay such graphs in capture order),
// or NULL for a fresh pool. On success *out is a graph to pass to fv_graph_end.
FV_EXPORT int fv_graph_begin(int device, void* pool_from, void** out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    TORCH_CHECK(out != nullptr, "fv_graph_begin: out is NULL");
    *out = nullptr;
    auto dev = static_cast<c10::DeviceIndex>(device);
    auto g = std::make_unique<FvGraph>();
    g->prev = c10::cuda::getCurrentCUDAStream(dev);
    g->side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, dev);
    // Before capture starts: the side stream must see what was already queued (inputs being
    // written). A wait added after capture began would be an illegal external dependency.
    wait_stream(*g->side, *g->prev);
    g->guard.emplace(*g->side);
    // Constructed after the guard so its bookkeeping stream is on the right device.
    g->graph = std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/false);
    at::cuda::MempoolId_t pool{0, 0};  // {0,0}: capture_begin makes a fresh private pool
    if (pool_from) pool = static_cast<FvGraph*>(pool_from)->graph->pool();
    g->graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    *out = g.release();
    // On any throw above, ~FvGraph restores the previous stream/device via the guard.
  });
}

// Ends capture (and instantiates the graph), restores the previous current stream even when
// capture_end throws, and on success makes that stream wait for the side stream.
FV_EXPORT int fv_graph_end(void* gp, char* err, size_t err_len) {
  auto* g = static_cast<FvGraph*>(gp);
  int rc = guarded(err, err_len, [&] {
    TORCH_CHECK(g && g->graph && g->guard, "fv_graph_end: graph is NULL or not capturing");
    g->graph->capture_end();
  });
  if (!g || !g->guard) return rc;
  // If capture_end threw before cudaStreamEndCapture (e.g. current stream changed under us),
  // the side stream is still capturing: abort that capture so later CUDA work isn't poisoned.
  if (rc != 0) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(g->side->stream(), &st) == cudaSuccess &&
        st != cudaStreamCaptureStatusNone) {
      cudaGraph_t dangling = nullptr;
      (void)cudaStreamEndCapture(g->side->stream(), &dangling);
      if (dangling) (void)cudaGraphDestroy(dangling);
    }
    (void)cudaGetLastError();  // clear the (non-sticky) last error for the next CUDA call
  }
  g->guard.reset();  // restore previous current stream + device
  if (rc == 0) {
    rc = guarded(err, err_len, [&] { wait_stream(*g->prev, *g->side); });
  }
  return rc;
}

// Launches the graph on torch's current stream (async; CUDAGraph::replay does not sync).
FV_EXPORT int fv_graph_replay(void* gp, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    auto* g = static_cast<FvGraph*>(gp);
    TORCH_CHECK(g && g->graph, "fv_graph_replay: graph is NULL");
    TORCH_CHECK(!g->guard, "fv_graph_replay: capture not ended (call fv_graph_end first)");
    g->graph->replay();
  });
}

// Frees the graph (CUDAGraph::reset returns its pool to the allocator; pending replays must be
// done or ordered before memory of the pool is reused, as with torch). Safe on NULL.
FV_EXPORT void fv_graph_free(void* gp) {
  auto* g = static_cast<FvGraph*>(gp);
  if (!g) return;
  try {
    delete g;  // ~CUDAGraph -> reset(); reports CUDA failures as warnings, not throws
  } catch (...) {
  }
}

// Raw cudaStream_t of torch's current stream on `device` (-1: current device), so kernels
// launched through the driver API join a capture. NULL is torch's default stream — and also
// what an error (e.g. no GPU) returns.
FV_EXPORT void* fv_current_stream(int device) {
  try {
    return static_cast<void*>(
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream());
  } catch (...) {
    return nullptr;
  }
}

// The caching allocator's byte counters on `device` (every pool together), as torch.cuda's
// memory_allocated / max_memory_allocated / memory_reserved / max_memory_reserved read them:
// out[0..4] = allocated current, allocated peak, reserved current, reserved peak. Why here: the
// driver's used memory (nvidia-smi) includes the cache and every process, not what a phase needs.
FV_EXPORT int fv_memory_stats(int device, long long* out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    TORCH_CHECK(out != nullptr, "fv_memory_stats: out is NULL");
    auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device));
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out[0] = s.allocated_bytes[all].current;
    out[1] = s.allocated_bytes[all].peak;
    out[2] = s.reserved_bytes[all].current;
    out[3] = s.reserved_bytes[all].peak;
  });
}

// Sets the peaks above to the current values (torch.cuda.reset_peak_memory_stats), after
// returning the cache's unused blocks to the driver when `empty_cache` (torch.cuda.empty_cache),
// so a phase's reserved peak is not what an earlier phase left cached.
FV_EXPORT int fv_memory_reset_peak(int device, int empty_cache, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (empty_cache) c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
}

// Caps the caching allocator on `device` at `fraction` of the device's memory
// (torch.cuda.set_per_process_memory_fraction): an allocation past it first frees the cache's
// unused blocks, then fails as out of memory. `--max-device-memory` holds a load to its budget.
FV_EXPORT int fv_memory_limit(int device, double fraction, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    TORCH_CHECK(fraction > 0.0 && fraction <= 1.0, "fv_memory_limit: fraction ", fraction, " not in (0, 1]");
    c10::cuda::CUDACachingAllocator::setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
  });
}

}  // extern "C"
