// Stream capture as a test of the current-stream rule (runtime/stream.h): code run under a StreamScope on a
// stream that is being captured into a CUDA graph must enqueue everything on that stream. The capture breaks
// (and CapturedGraph reports how) when the code
//   - launches, copies or sets memory on the legacy default stream: that work would implicitly wait for the
//     capturing stream, which CUDA refuses while the capturing stream is a blocking one (BlockingStream);
//   - synchronizes (cudaStreamSynchronize, cudaDeviceSynchronize, a synchronous cudaMemcpy) or makes a
//     call the thread-local capture mode forbids (cudaMalloc on an allocator cache miss: run the code once
//     before capturing so every scratch size is cached).
// A graph that captured cleanly holds the code's work as nodes; replaying it redoes that work, which a test
// compares with the eager results. CUDA builds only.
#pragma once

#ifndef ZT_WITH_CUDA
#error "tests/support/stream_capture.h is for CUDA builds only"
#endif

#include <cuda_runtime.h>

#include <exception>
#include <string>
#include <utility>

#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/stream.h"

namespace zt::test {

// A stream that synchronizes with the legacy default stream (zt::Stream creates non-blocking ones), so
// legacy-stream work during its capture is an error instead of running unseen beside the graph.
class BlockingStream {
 public:
  BlockingStream() { ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamDefault)); }
  ~BlockingStream() {
    retire_stream(stream_);  // per-stream caches (the GEMM workspace) let go of it first
    (void)cudaStreamDestroy(stream_);
  }
  BlockingStream(const BlockingStream&) = delete;
  BlockingStream& operator=(const BlockingStream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The graph of what `work` enqueues on `stream` (cudaStreamCaptureModeThreadLocal). Never throws for a
// broken capture: ok() is false and error() says what broke it.
class CapturedGraph {
 public:
  template <typename Work>
  CapturedGraph(cudaStream_t stream, Work&& work) {
    ZT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      std::forward<Work>(work)();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    const cudaError_t status = cudaStreamEndCapture(stream, &graph_);
    if (status != cudaSuccess && error_.empty()) {
      error_ = std::string("cudaStreamEndCapture: ") + cudaGetErrorName(status) + ": " +
               cudaGetErrorString(status);
    }
    (void)cudaGetLastError();  // a broken capture leaves its error behind; the next check must not see it
    if (!error_.empty() && graph_ != nullptr) {
      (void)cudaGraphDestroy(graph_);
      graph_ = nullptr;
    }
  }
  ~CapturedGraph() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  size_t node_count() const {
    size_t nodes = 0;
    if (graph_ != nullptr) ZT_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes));
    return nodes;
  }

  // Runs the captured work once more on `stream` and waits for it.
  void replay(cudaStream_t stream) {
    ZT_CHECK(ok(), "replay of a broken capture: ", error_);
    if (exec_ == nullptr) ZT_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
    ZT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::string error_;
};

}  // namespace zt::test
