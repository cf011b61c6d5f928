// cuBLASLt GEMM wrapper (kernels/cuda/gemm.h) and the shared helpers of kernels/cuda/gemm.cuh.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/gemm.cuh"
#include "runtime/cuda_check.h"
#include "runtime/stream.h"

namespace zt::kernels {

namespace {

// Whether work on `stream` may use state kept per stream handle (cached pointer arrays): not while the stream
// is being captured — a graph would keep pointers into state that later eager work changes or frees, and a
// first use would only record its initialization (a memset, a fill) into the graph — and not on the special
// handles whose work is not one stream's (cudaStreamPerThread is a different stream on each thread). Such
// calls fill their arrays per call (a captured one into the stream's capture buffer), bitwise the same.
bool is_shared_handle(cudaStream_t stream) {
  return stream == cudaStreamPerThread || stream == cudaStreamLegacy;
}

bool is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ZT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

bool per_stream_state_allowed(cudaStream_t stream) {
  return !is_shared_handle(stream) && !is_capturing(stream);
}
}  // namespace

namespace gpu {

void check_cuda_arg(const Tensor& t, const char* op, const char* name) {
  ZT_CHECK(t.defined(), op, ": ", name, " is undefined");
  ZT_CHECK(t.device() == DeviceKind::cuda, op, ": ", name, " must be a CUDA tensor, got ", t.describe());
  ZT_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.describe());
}

void check_cuda_arg(const Tensor& t, DType dtype, const char* op, const char* name) {
  check_cuda_arg(t, op, name);
  ZT_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ", t.describe());
}

namespace {

using cuda_detail::ColumnSumPlan;
using cuda_detail::kColumnSumRowLanes;
using cuda_detail::kColumnSumTile;

// Pass 1 of column_sum_into: the shared block body (kernels/cuda/column_sum.cuh) over x's values. Cutting
// the rows into chunks gives cols / (32 kVec) * chunks blocks instead of one chain of all 5,120 rows per
// column tile.
template <typename T, int kVec>
__global__ void column_sum_partial_kernel(const T* __restrict__ x, int64_t rows, int64_t cols,
                                          int64_t rows_per_chunk, float* __restrict__ partial) {
  const auto load = [&](int64_t r, int64_t c0, float(&v)[kVec]) {
    const cuda_detail::FloatSlice<T, kVec> slice(x + r * cols + c0);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = slice[k];
  };
  cuda_detail::column_sum_partials<kVec>(load, rows, cols, rows_per_chunk, partial);
}

// Pass 2 (add_chunk_partials) as its own kernel: block x takes columns [32x, 32x + 32). One thread per
// column walking every chunk took 37 us for 160 chunks x 1536 columns (a LayerNorm parameter gradient at
// B*L = 5120, ncu on the H200): 6 blocks, each a chain of 160 loads; 8 row lanes per column take ~3 us.
__global__ void add_chunk_partials_kernel(const float* __restrict__ partial, int64_t chunks, int64_t cols,
                                          bool overwrite, float* __restrict__ out) {
  cuda_detail::add_tile_partials(partial, chunks, cols, static_cast<int64_t>(blockIdx.x) * kColumnSumTile,
                                 kColumnSumTile, overwrite, out);
}

// C[z][r, c] += bias[c] over batch x [m, n] with row stride ldc: the bias epilogue where cuBLASLt's cannot
// be used (unaligned bias, or the cuBLAS fallback).
template <typename T>
__global__ void add_bias_kernel(T* __restrict__ c, const T* __restrict__ bias, int64_t batch, int64_t m,
                                int64_t n, int64_t ldc, int64_t batch_stride) {
  const int64_t total = batch * m * n;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = e % n, row = (e / n) % m, z = e / (m * n);
    T& out = c[z * batch_stride + row * ldc + col];
    out = from_float<T>(to_float(out) + to_float(bias[col]));
  }
}

}  // namespace

void column_sum_into(const void* x, DType dtype, int64_t rows, int64_t cols, float* out, GradWrite write,
                     cudaStream_t stream) {
  if (cols == 0) return;
  const ColumnSumPlan plan(rows);
  DeviceBuffer partial =
      scratch_buffer(static_cast<size_t>(plan.chunks * cols) * sizeof(float), "column_sum");
  dispatch_storage(dtype, "column_sum_into", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kPack = cuda_detail::Pack128<T>::kSize;
    const bool vector = cols % kPack == 0 && cuda_detail::is_aligned16(x);
    const auto kernel = vector ? column_sum_partial_kernel<T, kPack> : column_sum_partial_kernel<T, 1>;
    kernel<<<plan.grid(cols, vector ? kPack : 1), ColumnSumPlan::block(), 0, stream>>>(
        static_cast<const T*>(x), rows, cols, plan.rows_per_chunk, partial.data_as<float>());
    ZT_CUDA_CHECK_LAUNCH("column_sum_partial");
  });
  add_chunk_partials(partial.data_as<float>(), plan.chunks, cols, out, write, stream);
}

void add_chunk_partials(const float* partial, int64_t chunks, int64_t cols, float* out, GradWrite write,
                        cudaStream_t stream) {
  if (cols == 0) return;
  add_chunk_partials_kernel<<<static_cast<unsigned int>((cols + kColumnSumTile - 1) / kColumnSumTile),
                              ColumnSumPlan::block(), 0, stream>>>(partial, chunks, cols,
                                                                   write == GradWrite::overwrite, out);
  ZT_CUDA_CHECK_LAUNCH("add_chunk_partials");
}

}  // namespace gpu

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // NVIDIA's recommendation for Hopper
constexpr uint32_t kMaxAlignment = 256;               // cuBLASLt's default assumption
constexpr uint32_t kEpilogueBiasAlignment = 16;       // below this the bias epilogue is not trusted

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      ZT_FAIL("gemm: unsupported dtype ", dtype_name(dtype));
  }
}

// Largest power of two (<= 256) dividing the address: what cuBLASLt may assume about the pointer.
uint32_t alignment_of(uintptr_t address) {
  if (address == 0) return kMaxAlignment;
  uint32_t alignment = 1;
  while (alignment < kMaxAlignment && (address & alignment) == 0) alignment <<= 1;
  return alignment;
}

// Alignment every batch item of an operand keeps: item z starts at data + z * stride.
uint32_t operand_alignment(const void* data, int64_t batch_stride, int64_t batch, size_t element_size) {
  uint32_t alignment = alignment_of(reinterpret_cast<uintptr_t>(data));
  if (batch > 1 && batch_stride != 0) {
    alignment = std::min(alignment, alignment_of(static_cast<uintptr_t>(batch_stride) * element_size));
  }
  return alignment;
}

// Everything a cached plan depends on (pointers enter only through their alignment).
using PlanKey = std::array<int64_t, 20>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr;
  bool has_algorithm = false;  // false: cuBLAS fallback
  cublasLtMatmulAlgo_t algorithm{};
  bool epilogue_bias = false;  // the bias is added by cuBLASLt (else by add_bias_kernel)
};

// Per device: the cuBLASLt handle and the plans. Both are shared by every stream: a plan only describes a
// problem, and cuBLASLt keeps no per-call state in its handle (stream and workspace are arguments of every
// cublasLtMatmul). A plan's descriptor does carry the bias pointer, so setting it and enqueueing the matmul
// happen under g_mutex.
struct DeviceContext {
  cublasLtHandle_t lt = nullptr;
  std::map<PlanKey, Plan> plans;
};

// Per (device, stream): what GEMMs running at once on two streams must not share. cuBLASLt and cuBLAS
// write scratch into the workspace while a GEMM runs, and a cuBLAS handle binds one stream and workspace.
// A two-level batch's pointer arrays are a function of (bases, strides, batch, items) alone; the step runs
// the same attention products on the same arena addresses every time, so the arrays filled once are kept
// per stream and reused: one fill kernel less per product (~2 us each at bs 8, eight a layer; the step 1.9 %
// faster at bs 8, docs/DESIGN.md). Per stream, because the fill is queued on the stream that first asks:
// only its later work is ordered after it.
using PointerArrayKey = std::array<int64_t, 11>;  // 3 bases, 3 outer and 3 inner byte strides, batch, items
constexpr size_t kMaxCachedPointerArrays = 1024;  // then the cache starts over (addresses that moved)

struct StreamContext {
  DeviceBuffer workspace;  // kWorkspaceBytes, scratch of the allocator current at the stream's first GEMM
  cublasHandle_t blas = nullptr;  // created on first fallback, bound to the stream and `workspace`
  std::map<PointerArrayKey, DeviceBuffer> pointer_arrays;
  // Where captured calls write their pointer arrays (a capture may not allocate: cudaMalloc is refused), at
  // least as large as any arrays an eager call on the stream has cached. Captured work on one stream is
  // ordered, so its calls share it, like the workspace; a graph keeps pointing into it, so outgrown buffers
  // stay until the stream is retired.
  DeviceBuffer capture_pointer_arrays;
  std::vector<DeviceBuffer> outgrown_capture_pointer_arrays;
};

std::mutex g_mutex;  // guards everything below and the plans' descriptors (see DeviceContext)

// Created on first use and never destroyed: the process-wide device allocator the legacy stream's
// workspace draws from is never destroyed either, and freeing at exit would race the CUDA runtime's teardown.
std::map<int, DeviceContext*>& device_contexts() {
  static auto* contexts = new std::map<int, DeviceContext*>;
  return *contexts;
}
using StreamKey = std::pair<int, cudaStream_t>;  // (device, stream): the legacy stream exists per device
std::map<StreamKey, StreamContext>& stream_contexts() {
  static auto* contexts = new std::map<StreamKey, StreamContext>;
  return *contexts;
}

int current_device() {
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

DeviceContext& context_for_device(int device) {
  DeviceContext*& context = device_contexts()[device];
  if (context == nullptr) {
    auto* created = new DeviceContext;
    ZT_CUBLAS_CHECK(cublasLtCreate(&created->lt));
    context = created;
  }
  return *context;
}

void retire_gemm_stream(cudaStream_t stream);

// Where per-stream state (the GEMM workspace, cached pointer arrays) is allocated: a
// rank's stream from the rank's allocator (device_allocator(), AllocatorScope), given back when the stream is
// retired (~Stream); the legacy stream, shared by every thread and never destroyed, from the process-wide
// one.
DeviceAllocator& stream_state_allocator(int device, cudaStream_t stream) {
  return stream == nullptr ? process_device_allocator(device) : device_allocator(device);
}

// The stream's workspace and handle, created on its first GEMM (workspace from stream_state_allocator).
StreamContext& context_for_stream(int device, cudaStream_t stream) {
  auto [it, created] = stream_contexts().try_emplace(StreamKey{device, stream});
  if (created) {
    try {
      it->second.workspace = stream_state_allocator(device, stream)
                                 .allocate(kWorkspaceBytes, MemoryCategory::scratch, "gemm.workspace");
    } catch (...) {
      stream_contexts().erase(it);
      throw;
    }
    if (stream != nullptr) add_stream_retire_hook(&retire_gemm_stream);
  }
  return it->second;
}

// Moves the entries of `stream` (on any device) out of a per-stream map.
template <typename Value>
std::vector<Value> take_stream_entries(std::map<StreamKey, Value>& entries, cudaStream_t stream) {
  std::vector<Value> taken;
  for (auto it = entries.begin(); it != entries.end();) {
    if (it->first.second == stream) {
      taken.push_back(std::move(it->second));
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

// Drops what the contexts hold for a stream about to be destroyed (runtime/stream.h's retire hook). GEMMs
// still queued on it may be using the workspace or the pointer arrays, so the stream is drained before the
// memory goes back to its allocator's cache.
void retire_gemm_stream(cudaStream_t stream) {
  std::vector<StreamContext> retired;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    retired = take_stream_entries(stream_contexts(), stream);
  }
  if (retired.empty()) return;
  (void)cudaStreamSynchronize(stream);  // a hook must not throw; a failed stream has nothing left to wait for
  for (StreamContext& context : retired) {
    if (context.blas != nullptr) (void)cublasDestroy(context.blas);
    context.workspace.reset();
  }
}

// A row-major [rows, cols] matrix with row stride ld, seen by cuBLASLt as column-major [cols, rows].
cublasLtMatrixLayout_t make_layout(DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, cuda_data_type(dtype), static_cast<uint64_t>(cols),
                                             static_cast<uint64_t>(rows), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    ZT_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &batch_stride, sizeof(batch_stride)));
  }
  return layout;
}

Plan make_plan(DeviceContext& context, const GemmProblem& p, const std::array<uint32_t, 4>& alignments,
               bool epilogue_bias) {
  Plan plan;
  plan.epilogue_bias = epilogue_bias;
  const bool tf32 = p.allow_tf32 && p.input_dtype == DType::f32;
  ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(
      &plan.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A is our B and its B is our A (see the header), so the transposes swap too.
  const cublasOperation_t op_a = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  ZT_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (epilogue_bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = cuda_data_type(p.c.dtype);
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                   sizeof(epilogue)));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                   sizeof(bias_type)));
  }
  const int64_t a_rows = p.transpose_a ? p.k : p.m, a_cols = p.transpose_a ? p.m : p.k;
  const int64_t b_rows = p.transpose_b ? p.n : p.k, b_cols = p.transpose_b ? p.k : p.n;
  plan.layout_a = make_layout(p.input_dtype, b_rows, b_cols, p.b.ld, p.batch, p.b.batch_stride);  // ours: B
  plan.layout_b = make_layout(p.input_dtype, a_rows, a_cols, p.a.ld, p.batch, p.a.batch_stride);  // ours: A
  plan.layout_c = make_layout(p.c.dtype, p.m, p.n, p.c.ld, p.batch, p.c.batch_stride);

  cublasLtMatmulPreference_t preference = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = kWorkspaceBytes;
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes, sizeof(workspace_bytes)));
  // Lt's A/B are our B/A.
  const uint32_t align_lt_a = alignments[1], align_lt_b = alignments[0], align_c = alignments[2];
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                       &align_lt_a, sizeof(align_lt_a)));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       &align_lt_b, sizeof(align_lt_b)));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                       &align_c, sizeof(align_c)));
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                       &align_c, sizeof(align_c)));
  // The heuristic's first algorithm.
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(context.lt, plan.desc, plan.layout_a, plan.layout_b, plan.layout_c,
                                     plan.layout_c, preference, 1, &result, &found);
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  if (status == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan.has_algorithm = true;
    plan.algorithm = result.algo;
  } else if (status != CUBLAS_STATUS_NOT_SUPPORTED) {
    ZT_CUBLAS_CHECK(status);
  }
  return plan;
}

void check_fits_int(int64_t value, const char* what) {
  ZT_CHECK(value >= 0 && value <= INT_MAX, "gemm: ", what, " = ", value, " does not fit the cuBLAS fallback");
}

// The stream's cuBLAS (not Lt) handle, created on first use and bound once to the stream and its workspace
// (in that order: cublasSetStream resets the handle's workspace to cuBLAS's own pool).
cublasHandle_t blas_handle(StreamContext& context, cudaStream_t stream) {
  if (context.blas == nullptr) {
    cublasHandle_t created = nullptr;
    ZT_CUBLAS_CHECK(cublasCreate(&created));
    cublasStatus_t status = cublasSetStream(created, stream);
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasSetWorkspace(created, context.workspace.data(), kWorkspaceBytes);
    if (status != CUBLAS_STATUS_SUCCESS) (void)cublasDestroy(created);
    ZT_CUBLAS_CHECK(status);
    context.blas = created;
  }
  return context.blas;
}

// cublasGemmStridedBatchedEx with the same operand swap as the cuBLASLt path; any alignment works.
void run_fallback(StreamContext& context, const GemmProblem& p, cudaStream_t stream) {
  const cublasHandle_t blas = blas_handle(context, stream);
  for (int64_t v : {p.m, p.n, p.k, p.batch, p.a.ld, p.b.ld, p.c.ld}) check_fits_int(v, "a dimension");
  const bool tf32 = p.allow_tf32 && p.input_dtype == DType::f32;
  const cudaDataType_t input = cuda_data_type(p.input_dtype);
  ZT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      blas, p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(p.n), static_cast<int>(p.m), static_cast<int>(p.k), &p.alpha, p.b.data, input,
      static_cast<int>(p.b.ld), p.b.batch_stride, p.a.data, input, static_cast<int>(p.a.ld), p.a.batch_stride,
      &p.beta, p.c.data, cuda_data_type(p.c.dtype), static_cast<int>(p.c.ld), p.c.batch_stride,
      static_cast<int>(p.batch), tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

void add_bias(const GemmProblem& p, cudaStream_t stream) {
  gpu::dispatch_storage(p.c.dtype, "gemm bias", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t total = p.batch * p.m * p.n;
    const unsigned int grid = std::min(gpu::blocks_for(total, 256), 65535u);
    gpu::add_bias_kernel<T><<<grid, 256, 0, stream>>>(static_cast<T*>(p.c.data),
                                                      static_cast<const T*>(p.bias), p.batch, p.m, p.n,
                                                      p.c.ld, p.c.batch_stride);
    ZT_CUDA_CHECK_LAUNCH("gemm_add_bias");
  });
}

// Pointer arrays of a two-level batch: item i = o * batch + z of each operand at base + o * outer + z * inner
// (byte strides), written in the order cublasGemmBatchedEx reads them.
struct PointerArraySpec {
  const char* base[3];
  int64_t outer_bytes[3], inner_bytes[3];
};

__global__ void fill_pointer_arrays_kernel(const void** out, PointerArraySpec spec, int64_t batch,
                                           int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t o = i / batch, z = i % batch;
#pragma unroll
  for (int k = 0; k < 3; ++k)
    out[k * total + i] = spec.base[k] + o * spec.outer_bytes[k] + z * spec.inner_bytes[k];
}

// The two-level batch through cuBLAS's pointer-array GEMM, with the operand swap of the other paths.
void run_pointer_batched(StreamContext& context, const GemmProblem& p, cudaStream_t stream) {
  const int64_t total = p.outer * p.batch;
  for (int64_t v : {p.m, p.n, p.k, total, p.a.ld, p.b.ld, p.c.ld}) check_fits_int(v, "a dimension");
  const int64_t in = static_cast<int64_t>(dtype_size(p.input_dtype));
  const int64_t out = static_cast<int64_t>(dtype_size(p.c.dtype));
  // Order: cuBLAS's A (our B), cuBLAS's B (our A), C.
  const PointerArraySpec spec{{static_cast<const char*>(p.b.data), static_cast<const char*>(p.a.data),
                               static_cast<const char*>(p.c.data)},
                              {p.b.outer_stride * in, p.a.outer_stride * in, p.c.outer_stride * out},
                              {p.b.batch_stride * in, p.a.batch_stride * in, p.c.batch_stride * out}};
  const auto fill = [&](DeviceBuffer& buffer) {
    fill_pointer_arrays_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream>>>(
        buffer.data_as<const void*>(), spec, p.batch, total);
    ZT_CUDA_CHECK_LAUNCH("gemm_fill_pointer_arrays");
  };
  const size_t bytes = static_cast<size_t>(3 * total) * sizeof(void*);
  DeviceBuffer pointers;  // this call's arrays, when not cached
  const void** arrays = nullptr;
  if (per_stream_state_allowed(stream)) {
    PointerArrayKey key{};
    for (int k = 0; k < 3; ++k) {
      key[static_cast<size_t>(k)] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(spec.base[k]));
      key[static_cast<size_t>(3 + k)] = spec.outer_bytes[k];
      key[static_cast<size_t>(6 + k)] = spec.inner_bytes[k];
    }
    key[9] = p.batch;
    key[10] = total;
    auto it = context.pointer_arrays.find(key);
    if (it == context.pointer_arrays.end()) {
      // Dropped arrays may still be read by GEMMs queued on this stream; released blocks are reusable at
      // once, so this is the per-call path's convention (scratch released after its work is queued on the
      // current stream, runtime/device_allocator.h), no weaker.
      if (context.pointer_arrays.size() >= kMaxCachedPointerArrays) context.pointer_arrays.clear();
      DeviceBuffer arrays_buffer =
          stream_state_allocator(current_device(), stream)
              .allocate(bytes, MemoryCategory::scratch, "gemm.pointer_arrays.cached");
      it = context.pointer_arrays.emplace(key, std::move(arrays_buffer)).first;
      fill(it->second);
      if (context.capture_pointer_arrays.size() < bytes) {
        DeviceBuffer grown = stream_state_allocator(current_device(), stream)
                                 .allocate(bytes, MemoryCategory::scratch, "gemm.pointer_arrays.capture");
        if (context.capture_pointer_arrays.size() > 0)
          context.outgrown_capture_pointer_arrays.push_back(std::move(context.capture_pointer_arrays));
        context.capture_pointer_arrays = std::move(grown);
      }
    }
    arrays = it->second.data_as<const void*>();
  } else if (!is_shared_handle(stream) && context.capture_pointer_arrays.size() >= bytes) {
    // Under capture (the only other way here for a stream's own handle), into memory an eager call reserved.
    fill(context.capture_pointer_arrays);
    arrays = context.capture_pointer_arrays.data_as<const void*>();
  } else {
    pointers = device_allocator().allocate(bytes, MemoryCategory::scratch, "gemm.pointer_arrays");
    fill(pointers);
    arrays = pointers.data_as<const void*>();
  }
  const bool tf32 = p.allow_tf32 && p.input_dtype == DType::f32;
  const cudaDataType_t input = cuda_data_type(p.input_dtype);
  ZT_CUBLAS_CHECK(
      cublasGemmBatchedEx(blas_handle(context, stream), p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(p.n),
                          static_cast<int>(p.m), static_cast<int>(p.k), &p.alpha, arrays, input,
                          static_cast<int>(p.b.ld), arrays + total, input, static_cast<int>(p.a.ld), &p.beta,
                          const_cast<void* const*>(reinterpret_cast<const void* const*>(arrays + 2 * total)),
                          cuda_data_type(p.c.dtype), static_cast<int>(p.c.ld), static_cast<int>(total),
                          tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void check_problem(const GemmProblem& p) {
  ZT_CHECK(p.m >= 0 && p.n >= 0 && p.k >= 0 && p.batch >= 0, "gemm: negative size (m ", p.m, ", n ", p.n,
           ", k ", p.k, ", batch ", p.batch, ")");
  ZT_CHECK(gpu::is_storage_dtype(p.input_dtype), "gemm: inputs must be f32, bf16 or f16, got ",
           dtype_name(p.input_dtype));
  ZT_CHECK(p.c.dtype == p.input_dtype || p.c.dtype == DType::f32, "gemm: output must be ",
           dtype_name(p.input_dtype), " or f32, got ", dtype_name(p.c.dtype));
  ZT_CHECK(p.a.ld >= std::max<int64_t>(1, p.transpose_a ? p.m : p.k), "gemm: lda ", p.a.ld, " too small");
  ZT_CHECK(p.b.ld >= std::max<int64_t>(1, p.transpose_b ? p.k : p.n), "gemm: ldb ", p.b.ld, " too small");
  ZT_CHECK(p.c.ld >= std::max<int64_t>(1, p.n), "gemm: ldc ", p.c.ld, " too small");
  if (p.epilogue == GemmEpilogue::bias) ZT_CHECK(p.bias != nullptr, "gemm: bias epilogue without a bias");
  ZT_CHECK(p.outer >= 0, "gemm: negative outer batch ", p.outer);
  ZT_CHECK(p.outer <= 1 || p.epilogue == GemmEpilogue::none, "gemm: no bias epilogue with an outer batch");
}

}  // namespace

void gemm(const GemmProblem& problem, cudaStream_t stream) {
  check_problem(problem);
  if (problem.m == 0 || problem.n == 0 || problem.batch == 0 || problem.outer == 0) return;
  ZT_CHECK(problem.k > 0, "gemm: k = 0 (an empty inner dimension) is not supported");
  GemmProblem p = problem;
  if (p.outer > 1) {
    // Fold the two levels into one strided batch where the strides allow: with one inner item the outer
    // stride is the only stride; with uniform strides the items are equally spaced.
    const bool uniform = p.a.outer_stride == p.batch * p.a.batch_stride &&
                         p.b.outer_stride == p.batch * p.b.batch_stride &&
                         p.c.outer_stride == p.batch * p.c.batch_stride;
    if (p.batch == 1) {
      p.a.batch_stride = p.a.outer_stride;
      p.b.batch_stride = p.b.outer_stride;
      p.c.batch_stride = p.c.outer_stride;
    } else if (!uniform) {
      const int device = current_device();
      const std::lock_guard<std::mutex> lock(g_mutex);
      run_pointer_batched(context_for_stream(device, stream), p, stream);
      return;
    }
    p.batch *= p.outer;
    p.outer = 1;
  }
  const size_t in_size = dtype_size(p.input_dtype), out_size = dtype_size(p.c.dtype);
  const std::array<uint32_t, 4> alignments{
      operand_alignment(p.a.data, p.a.batch_stride, p.batch, in_size),
      operand_alignment(p.b.data, p.b.batch_stride, p.batch, in_size),
      operand_alignment(p.c.data, p.c.batch_stride, p.batch, out_size),
      p.bias ? alignment_of(reinterpret_cast<uintptr_t>(p.bias)) : kMaxAlignment};
  const bool want_bias = p.epilogue == GemmEpilogue::bias;
  const bool epilogue_bias = want_bias && alignments[3] >= kEpilogueBiasAlignment;
  const PlanKey key{p.m,
                    p.n,
                    p.k,
                    p.batch,
                    static_cast<int64_t>(p.input_dtype),
                    static_cast<int64_t>(p.c.dtype),
                    p.transpose_a,
                    p.transpose_b,
                    p.a.ld,
                    p.b.ld,
                    p.c.ld,
                    p.a.batch_stride,
                    p.b.batch_stride,
                    p.c.batch_stride,
                    epilogue_bias,
                    p.allow_tf32 && p.input_dtype == DType::f32,
                    alignments[0],
                    alignments[1],
                    alignments[2],
                    0};

  const int device = current_device();
  const std::lock_guard<std::mutex> lock(g_mutex);
  DeviceContext& context = context_for_device(device);
  StreamContext& on_stream = context_for_stream(device, stream);
  auto it = context.plans.find(key);
  if (it == context.plans.end())
    it = context.plans.emplace(key, make_plan(context, p, alignments, epilogue_bias)).first;
  Plan& plan = it->second;
  if (plan.has_algorithm) {
    if (plan.epilogue_bias) {
      ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                                     sizeof(p.bias)));
    }
    ZT_CUBLAS_CHECK(cublasLtMatmul(context.lt, plan.desc, &p.alpha, p.b.data, plan.layout_a, p.a.data,
                                   plan.layout_b, &p.beta, p.c.data, plan.layout_c, p.c.data, plan.layout_c,
                                   &plan.algorithm, on_stream.workspace.data(), kWorkspaceBytes, stream));
    if (want_bias && !plan.epilogue_bias) add_bias(p, stream);
  } else {
    run_fallback(on_stream, p, stream);
    if (want_bias) add_bias(p, stream);
  }
}

int64_t gemm_cached_plan_count() {
  const int device = current_device();
  const std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(context_for_device(device).plans.size());
}

int64_t gemm_stream_workspace_count() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(stream_contexts().size());
}

int64_t gemm_cached_pointer_array_count() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  int64_t count = 0;
  for (const auto& [key, context] : stream_contexts())
    count += static_cast<int64_t>(context.pointer_arrays.size());
  return count;
}

}  // namespace zt::kernels
