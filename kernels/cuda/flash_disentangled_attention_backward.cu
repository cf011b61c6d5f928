// The flash disentangled attention's backward: D = rowsum(dC * context), then one kernel for dQ, dK, dV, Gc
// and Gp (see flash_disentangled_attention.cuh for the algorithm, flash_attention_tiles.cuh for the
// fragments, tiles and staging it is built from).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cuda/flash_attention_tiles.cuh"
#include "kernels/cuda/flash_disentangled_attention.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/rank_device.h"

namespace zt::kernels::gpu {
namespace {

using namespace flash_tiles;  // NOLINT(google-build-using-namespace): this file's building blocks

// D[b, h, i] = sum_k dC[b, i, h*d + k] context[b, i, h*d + k] in f32: a warp per (b, i, h).
template <typename T>
__global__ void flash_row_dot_kernel(FlashAttentionParams p) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.length * p.heads;
  if (row >= rows) return;
  const int64_t h = row % p.heads, bi = row / p.heads, b = bi / p.length, i = bi % p.length;
  const T* dc = static_cast<const T*>(p.dcontext) + bi * p.features + h * kD;
  const T* c = static_cast<const T*>(p.context) + bi * p.features + h * kD;
  float sum = to_float(dc[lane]) * to_float(c[lane]) + to_float(dc[lane + 32]) * to_float(c[lane + 32]);
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) p.row_dot[(b * p.heads + h) * p.length + i] = sum;
}

struct BackwardShared {
  // The tile's diagonals i0 - j0 - 63 + t (load_diagonals' table, t < 127) and one past its end (t = 127);
  // diag_before the one before its start: one_distance_step's view.
  int diag[kDiagonals + 1];
  int diag_before;
  float query_term[kTile], key_term[kTile];  // uniform tiles: C2P[i, c0], P2C[j, c0]
  // The looped-over query tile's mask, bit t of word t / 32 = m_i of row i0 + t (0 past L), its stats and D.
  alignas(8) uint32_t query_bits[kTile / 32];
  float other_max[kTile], other_inverse[kTile], other_dot[kTile];
  uint32_t keep_lanes[kThreads];  // dropout: thread t's keep bits (Note [keep lanes]), in its own slot
};

// Note [keep lanes]: bit 8 e + nt of thread (w, g, q)'s keep word (lane = 4 g + q) keeps its element
// s[nt][e], P[i0 + 8 nt + 2 q + e % 2, j0 + local_key[e / 2]] (local_key[r] = 16 w + g + 8 r), by the
// unfused path's draw (philox.h's attention draw: rows padded to 8 keys, key j of row r is half e % 8 of
// Philox block e / 8, e = r pitch + j); elements past L get 0. A block is keys 8 m .. 8 m + 7 of one query:
// its bit k (key 8 m + k) belongs to lane (g = k, q) of warp m / 2, so the 8 lanes of one q in a warp need
// the same 32 blocks (queries 8 nt + 2 q + 0, 1 x key groups 2 w, 2 w + 1), and each draws 4 of them: lane
// (g, q) those of nt = g, byte e of its word = block (query 8 g + 2 q + e % 2, key group 2 w + e / 2). The
// 8 words are then transposed by 8 shuffles: the sender's word rotated left by its g', the receiver's copy
// right by its g puts bit g of byte e (its key) at bit 8 e + g' (nt = g'), kept by the mask 0x01010101 << g'.
// The thread stores its word in its own slot (only it reads it: no barrier) and later tests one bit an
// element instead of a byte of a [query][key] tile.
__device__ __forceinline__ void draw_keep_lanes(uint32_t* keep_lanes, const FlashAttentionParams& p,
                                                int64_t bh, int i0, int j0) {
  const uint32_t threshold = attention_keep_threshold(p.dropout_p);
  const int t = static_cast<int>(threadIdx.x), warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  const uint64_t L = static_cast<uint64_t>(p.length), pitch = attention_row_pitch(L);
  const int query = 8 * g + 2 * q, key_group = 2 * warp;  // byte e: query + e % 2, key group + e / 2
  const uint64_t first = ((static_cast<uint64_t>(bh) * L + i0 + query) * pitch + j0) / 8 + key_group;
  const uint64_t block[4] = {first, first + pitch / 8, first + 1, first + pitch / 8 + 1};
  PhiloxCounter blocks[4];
  philox_blocks(p.seed, p.site_id, block, blocks);
  uint32_t drawn = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const bool valid = i0 + query + e % 2 < p.length && j0 + 8 * (key_group + e / 2) < p.length;
    drawn |= (valid ? attention_keep_bits(blocks[e], threshold) : 0u) << (8 * e);
  }
  const uint32_t sent = __funnelshift_l(drawn, drawn, g);
  uint32_t word = 0;
#pragma unroll
  for (int source = 0; source < 8; ++source) {
    const uint32_t theirs = __shfl_sync(0xffffffffu, sent, 4 * source + q);
    word |= __funnelshift_r(theirs, theirs, g) & (0x01010101u << source);
  }
  keep_lanes[t] = word;
}
// A tile's positional terms by (key kj, query qi), one per score: C2P[i0 + qi, c] and P2C[j0 + kj, c] with
// c = c(i, j) from the diagonal table, gathered once per tile so the score loop reads two words a score at
// addresses known without a lookup (no diagonal, no slice offset). Any bucketing. Warp w reads only the
// rows of its own 16 keys: they lie in one region of 2 x 16 x 64 floats (C2P rows, then P2C rows), 64
// floats a row with the columns XOR-swizzled by (kj % 4) * 8 (key kj, query qi, term 0 for C2P, 1 for P2C
// at (kj / 16) kPositionalRegion + term 16 * 64 + (kj % 16) 64 + (qi ^ 8 (kj % 4))), so that a warp's 64-bit
// reads (lane (g, q): key g, queries 2q, 2q + 1) hit 32 distinct banks in each half-warp.
constexpr int kKeysPerWarp = 16;
constexpr int kPositionalRegion = 2 * kKeysPerWarp * kTile;                 // floats, one warp's keys
constexpr size_t kPositionalBytes = kThreads / 32 * kPositionalRegion * 4;  // 32 KiB
// G [key][query] f32 (dQ's A operand and the bucket sums) shares those regions: key kj's row, kGradPitch
// floats, in the region of kj's warp (16 rows, 1040 floats, from 16 w past the region's start: rows kj and
// kj + 16 of a Gp column read fall in distinct banks), written by that warp once its last read of the
// positional terms is done and read before the barrier ahead of the next tile's staging.
constexpr int kGradChunkStride = kPositionalRegion + kKeysPerWarp;
static_assert(3 * kGradChunkStride + kKeysPerWarp * kGradPitch <= 4 * kPositionalRegion);
__device__ __forceinline__ int grad_row(int kj) {
  return (kj / kKeysPerWarp) * kGradChunkStride + (kj % kKeysPerWarp) * kGradPitch;
}
// A tile whose every bucket holds one distance ("linear": |i - j| up to about position_buckets / 2) makes
// each G element its own run and the only addend of its (row, bucket) in Gc and Gp: a row is stored whole,
// a warp a row at a time with its lanes along it (c(i - j) steps by one: one or two segments a store), not
// a thread a row with a store or reduction an element. Thread t checks that the bucket steps by one from
// diagonal i0 - j0 - 64 + t to the next: the tile's 127 diagonals and one past each end (a bucket at an end
// may reach the next tile's distances). Diagonals past the sequence's ends repeat theirs: not linear.
static_assert(kThreads == 2 * kTile);
// The table's entries for the tile's 127 diagonals and one past each end, a thread each (thread t: diagonal
// i0 - j0 - 63 + t, so thread 127 the one past the end; thread 0 also the one before the start):
// diagonal_at's clamped lookup, written from the tile's first diagonal (the form measured on the GPU;
// diagonal_at itself compiles to other SASS here).
__device__ __forceinline__ void load_diagonals_with_ends(BackwardShared& sh, const FlashAttentionParams& p,
                                                         int i0, int j0) {
  const int L = p.length, t = static_cast<int>(threadIdx.x), first = i0 - j0 - (kTile - 1);
  const auto entry = [&](int diagonal) { return p.diagonal[min(max(diagonal, 1 - L), L - 1) + L - 1]; };
  sh.diag[t] = entry(first + t);
  if (t == 0) sh.diag_before = entry(first - 1);
}
// Thread t: whether the bucket steps by one from diagonal i0 - j0 - 64 + t to the next (both in shared
// memory: diag_before, then diag[0 ..]).
__device__ __forceinline__ bool one_distance_step(const BackwardShared& sh) {
  const int t = static_cast<int>(threadIdx.x);
  return sh.diag[t] == (t == 0 ? sh.diag_before : sh.diag[t - 1]) + 1;
}
// Warp w stores Gc rows (queries) and Gp rows (keys) 16 w .. 16 w + 15 of the tile, keys and queries past L
// left out. 0 + G: the bits a run's sum, 0 + its one value, has (-0 stored as +0).
__device__ __forceinline__ void store_linear_tile_rows(const FlashAttentionParams& p, const float* grad,
                                                       const int* diag, int64_t head_rows, int i0, int j0,
                                                       int warp, int lane) {
  const int L = p.length;
#pragma unroll 4
  for (int r = 0; r < kKeysPerWarp; ++r) {
    const int row = warp * kKeysPerWarp + r;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = lane + 32 * half;
      if (p.gc != nullptr && i0 + row < L && j0 + col < L)  // query i0 + row, key j0 + col
        p.gc[(head_rows + i0 + row) * p.window_pitch + diag[row - col + kTile - 1]] =
            0.0f + grad[grad_row(col) + row];
      if (p.gp != nullptr && j0 + row < L && i0 + col < L)  // key j0 + row, query i0 + col
        p.gp[(head_rows + j0 + row) * p.window_pitch + diag[col - row + kTile - 1]] =
            0.0f + grad[grad_row(row) + col];
    }
  }
}
// Rows past L and absent terms read 0. Element k of the thread (k < 32) is key kj0 + 4 (k / 2), query
// qi0 + 32 (k % 2), with kj0 = lane / 8, qi0 = 8 warp + lane % 8 (a warp: C2P 8 rows of 4 adjacent table
// entries, P2C 4 rows of 8): every index is a per-thread base plus a constant (kj % 4 = kj0, so the swizzle
// is the base's), nothing for the compiler to keep. An element's C2P and P2C terms share c, read once. Each
// term's rows are addressed from the tile's first row (C2P: query i0, P2C: key j0), one 64-bit pointer a
// term, by a 32-bit offset local row x window_pitch + c: the thread's first row times the pitch once, the
// element's rows a constant multiple of the pitch past it (C2P 32 pitch, P2C steps of 4 pitch), so an
// element costs an add and a load, not a 64-bit row product; a row past L is the local row compared with the
// rows left. 16 loads in flight a thread before their stores.
__device__ __forceinline__ void stage_positional_tiles(float* tiles, const FlashAttentionParams& p,
                                                       const int* diag, int64_t head_rows, int i0, int j0) {
  constexpr int kKeySteps = kTile * kTile / kThreads / 2;  // keys kj0 + 4 m, two queries each
  constexpr int kStepsPerBatch = 4;                        // x 2 queries x 2 terms: 16 loads
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int kj0 = lane / 8, qi0 = 8 * warp + lane % 8;
  const int* diag_base = diag + qi0 - kj0 + kTile - 1;
  float* store_base = tiles + kj0 * kTile + (qi0 ^ (kj0 << 3));
  // 32-bit offsets: local row < 64 and c < window <= window_pitch, so an offset is below 64 window_pitch,
  // which the launcher keeps within int32.
  const int pitch = p.window_pitch;
  const bool has_c2p = p.c2p != nullptr, has_p2c = p.p2c != nullptr;
  const float* c2p = has_c2p ? p.c2p + (head_rows + i0) * pitch : nullptr;
  const float* p2c = has_p2c ? p.p2c + (head_rows + j0) * pitch : nullptr;
  const int c2p_first = qi0 * pitch, p2c_first = kj0 * pitch;
  // C2P row qi0 + 32 h is below L while 32 h < query_rows, P2C row kj0 + 4 m while 4 m < key_rows.
  const int query_rows = p.length - i0 - qi0, key_rows = p.length - j0 - kj0;
#pragma unroll
  for (int batch = 0; batch < kKeySteps; batch += kStepsPerBatch) {
    float c2p_value[kStepsPerBatch][2], p2c_value[kStepsPerBatch][2];
#pragma unroll
    for (int m = batch; m < batch + kStepsPerBatch; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // element k = 2 m + h: key kj0 + 4 m, query qi0 + 32 h
        const int c = diag_base[32 * h - 4 * m];
        c2p_value[m - batch][h] = has_c2p && 32 * h < query_rows ? c2p[c2p_first + 32 * h * pitch + c] : 0.0f;
        p2c_value[m - batch][h] = has_p2c && 4 * m < key_rows ? p2c[p2c_first + 4 * m * pitch + c] : 0.0f;
      }
    }
#pragma unroll
    for (int m = batch; m < batch + kStepsPerBatch; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // key kj0 + 4m: region m / 4, row kj0 + 4 (m % 4) of it
        float* out = store_base + (m / 4) * kPositionalRegion + (m % 4) * 4 * kTile + 32 * h;
        if (has_c2p) out[0] = c2p_value[m - batch][h];
        if (has_p2c) out[kKeysPerWarp * kTile] = p2c_value[m - batch][h];
      }
    }
  }
}

// How a tile's scores a(i, j) are formed: the content product alone, a far tile's one bucket (a term per
// query and per key), or the staged per-score terms.
enum class ScoreTerms { content, uniform, tiled };

// A query tile's keep flag, statistics and D of row i0 + t (thread t < 64), loaded into registers and
// later stored into shared memory (the loads in flight while the thread does other work).
struct QueryStats {
  bool kept = false;
  float2 stats = make_float2(0.0f, 0.0f);
  float dot = 0.0f;
};
__device__ __forceinline__ QueryStats load_query_stats(const FlashAttentionParams& p, int64_t b, int64_t bh,
                                                       int i0) {
  const int t = static_cast<int>(threadIdx.x), i = i0 + t, L = p.length;
  QueryStats row;
  if (t < kTile && i < L) {
    row.kept = p.keep[b * L + i] != 0;
    row.stats = *reinterpret_cast<const float2*>(p.stats + (bh * L + i) * 2);
    row.dot = p.row_dot[bh * L + i];
  }
  return row;
}
__device__ __forceinline__ void store_query_stats(BackwardShared& sh, const QueryStats& row) {
  const int t = static_cast<int>(threadIdx.x);
  if (t >= kTile) return;
  const uint32_t kept = __ballot_sync(0xffffffffu, row.kept);  // warps 0 and 1, all lanes here
  if (t % 32 == 0) sh.query_bits[t / 32] = kept;
  sh.other_max[t] = row.stats.x;
  sh.other_inverse[t] = row.stats.y;
  sh.other_dot[t] = row.dot;
}
__device__ __forceinline__ void wait_all_copies() {
  asm volatile("cp.async.wait_all;\n" ::);
}
// Rows i0 .. i0 + 63 of Q and dC into their tiles by cp.async (zero past L). The thread index read afresh
// (volatile), so the copies' addresses are computed here each tile, not kept in registers through the loop.
template <typename T>
__device__ __forceinline__ void prefetch_query_tiles(T* q_tile, T* dc_tile, const FlashAttentionParams& p,
                                                     int64_t b, int64_t h, int i0) {
  uint32_t thread;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(thread));
  const T* q = static_cast<const T*>(p.q);
  const T* dc = static_cast<const T*>(p.dcontext);
#pragma unroll
  for (int k = 0; k < kTile * 8 / kThreads; ++k) {
    const int chunk = static_cast<int>(thread) + k * kThreads, r = chunk / 8, c = chunk % 8;
    const bool valid = i0 + r < p.length;
    const int64_t offset = valid ? (b * p.length + i0 + r) * p.features + h * kD + c * 8 : 0;
    copy_async16(q_tile + r * kPitch + c * 8, q + offset, valid);
    copy_async16(dc_tile + r * kPitch + c * 8, dc + offset, valid);
  }
  commit_async_copies();
}

// One row of Gc (by query, over the keys of one tile, grad_row[col * stride]): the interior runs of equal
// buckets added into out at once, the first and last runs returned (bucket -1: none) for the caller to add
// in key-tile order. One run: first only.
struct EdgeRuns {
  int first_bucket = -1, last_bucket = -1;
  float first_sum = 0.0f, last_sum = 0.0f;
};
// Each column a step without a branch in the C++ (the addition add_where's, the run and the first sum
// selected), so the lanes of a warp, whose rows change bucket at different columns, rejoin at once. The same
// sums: a run starts at 0 + its first value and adds the rest in column order (the first run begins in column
// 0's bucket at 0, so no step tests for "no run yet"). The first run is told apart by its bucket, column 0's:
// c is monotone along the row, so no later run has it (no per-column flag for "first edge taken").
__device__ __forceinline__ EdgeRuns add_interior_runs(float* out, const float* grad_column, const int* diag,
                                                      int local, int columns) {
  const int first = diag[local + kTile - 1];
  float run = 0.0f, first_sum = 0.0f;
  int bucket = first;
  auto step = [&](int col) {
    const int c = diag[local - col + kTile - 1];
    const float value = grad_column[grad_row(col)];
    const bool changes = c != bucket, in_first = bucket == first;
    add_where(changes && !in_first, out, bucket, run);
    first_sum = in_first ? run : first_sum;  // the first run's sum so far; final once it ends
    run = (changes ? 0.0f : run) + value;
    bucket = c;
  };
  for_each_column(columns, step);
  EdgeRuns edges;
  edges.first_bucket = first;
  edges.first_sum = bucket == first ? run : first_sum;
  if (bucket != first) {
    edges.last_bucket = bucket;
    edges.last_sum = run;
  }
  return edges;
}

// The order of the additions into dQ and Gc across CTAs: a per-(b, h, query tile) count of the key tiles
// added so far, read with acquire and advanced with release (PTX memory model) by thread 0 around barriers.
__device__ __forceinline__ int load_acquire(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}
__device__ __forceinline__ void store_release(int* address, int value) {
  asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

// One CTA per (b, h, 64 keys) loops over the query tiles: dK = G^T Q, dV = P~^T dC and Gp in this CTA's
// registers and rows, and each tile's dQ part G K and Gc sums added into dq_sum / Gc in a fixed order of the
// key tiles: the k-th adder of a query tile waits until its count says k, adds, and advances it; the last
// writes dQ in T. CTAs take their (key tile, b, h) from a ticket in launch order. Two orders
// (FlashAttentionParams::rotated_order):
//   ascending: step k visits query tile k, whose adders are key tiles 0, 1, ..., n - 1. A CTA waits only
//     for earlier tickets (forward progress whatever the residency), but the n CTAs of a head start
//     together, so key tile t first waits t hops (a hop: the predecessor's add and release, ~4 us): n^2 / 2
//     hops of idle CTA slots a head, ~17 % of the kernel at 1 x 8192 (n = 128) on an H100;
//   rotated: step k visits query tile (t + k) mod n as its k-th adder (adders of tile i: key tiles i, i - 1,
//     ..., i + 1 mod n), each a whole step after the one before it: no skew. CTA t waits on CTA t + 1 (mod
//     n), a later ticket, so a head's n CTAs must be able to be resident together: the host chooses it only
//     when they fit beside the other ranks' (flash_backward_rotated_order).
// Deterministic either way: every sum has a fixed order for a given (L, order).
// 3 CTAs an SM (12 warps, 3 a scheduler, to hide the fixed-latency dependencies of the score and product
// chains): at most 168 registers a thread (65536 / 384, in steps of 8) and 72.0 KB of shared memory a CTA
// (3 x (72.0 + 1 reserved) KB <= 228 KB).
constexpr int kBackwardCtasPerSm = 3;
template <typename T>
__global__ void __launch_bounds__(kThreads, kBackwardCtasPerSm)
    flash_attention_backward_kernel(FlashAttentionParams p) {
  // Dynamic: this CTA's K and V tiles (the A operands, read by ldmatrix each tile), then the positional
  // tiles.
  // Q and dC: one buffer each (a second would cost 18 KiB and the third CTA), the next tile's copied in by
  // cp.async once this tile's last product has read them.
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  const T* k_fixed = reinterpret_cast<const T*>(dynamic_shared);
  const T* v_fixed = k_fixed + kTile * kPitch;
  float* positional_tiles = reinterpret_cast<float*>(dynamic_shared + kFixedTileBytes);
  float* grad = positional_tiles;  // G, by grad_row
  __shared__ __align__(16) T q_tile[kTile * kPitch];
  __shared__ __align__(16) T dc_tile[kTile * kPitch];
  __shared__ BackwardShared sh;
  __shared__ int ticket;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int L = p.length;
  const int tiles = (L + kTile - 1) / kTile;
  const int64_t heads_total = static_cast<int64_t>(p.batch) * p.heads;
  if (threadIdx.x == 0) ticket = atomicAdd(p.tile_order + heads_total * tiles, 1);
  __syncthreads();
  const int key_tile = ticket % tiles;
  const int j0 = key_tile * kTile;
  // Step k visits query tile query_tile_at(k) as the adder(k)-th key tile to add into its dQ / Gc.
  auto query_tile_at = [&](int step) { return p.rotated_order ? (key_tile + step) % tiles : step; };
  auto adder = [&](int step) { return p.rotated_order ? step : key_tile; };
  const int64_t bh = ticket / tiles, b = bh / p.heads, h = bh % p.heads;
  const int64_t head_rows = (h * p.batch + b) * L;
  const bool positional = p.c2p != nullptr || p.p2c != nullptr;
  const bool bucket_grads = p.gc != nullptr || p.gp != nullptr;
  int* order = p.tile_order + bh * tiles;

  load_tile(const_cast<T*>(k_fixed), static_cast<const T*>(p.k), p, b, h, j0);
  load_tile(const_cast<T*>(v_fixed), static_cast<const T*>(p.v), p, b, h, j0);

  const int local_key[2] = {warp * 16 + g, warp * 16 + g + 8};
  // A masked score's value: kMasked (finfo.min, as unfused) for a key < L, -inf for a key past L, so that
  // P = exp(-inf - m_i) / l_i is +0 there without a bounds check (as it was), whatever m_i (a fully masked
  // row has m_i = kMasked: exp(kMasked - m_i) = 1). A query past L is masked by its 0 bit in query_bits and
  // has m_i = 1 / l_i = 0 (load_query_stats): exp(kMasked or -inf) * 0 = +0.
  bool key_kept[2];
  float key_masked[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = j0 + local_key[r];
    key_kept[r] = j < L && p.keep[b * L + j] != 0;
    key_masked[r] = j < L ? kMasked : -INFINITY;
  }
  const float inverse_scale = p.inverse_scale;  // read once (not an LDC per score)
  // m_i m_j of this thread's elements: bit 8 (nt % 4) + e % 2 of mask[e / 2][nt / 4] for s[nt][e] (query
  // 8 nt + 2q + e % 2 = bit 2q + that of query_bits[nt / 4], key local_key[e / 2]); 0 past L, as key_kept
  // and query_bits are.
  auto element_masks = [&](uint32_t(&mask)[2][2]) {
    const uint2 query = *reinterpret_cast<const uint2*>(sh.query_bits);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mask[r][0] = key_kept[r] ? query.x >> (2 * q) : 0u;
      mask[r][1] = key_kept[r] ? query.y >> (2 * q) : 0u;
    }
  };
  auto element_kept = [](const uint32_t(&mask)[2][2], int nt, int e) {
    return ((mask[e / 2][nt / 4] >> (8 * (nt % 4) + e % 2)) & 1u) != 0;
  };
  // This thread's keep bits (Note [keep lanes]), all set without dropout; element (nt, e) is bit 8 e + nt.
  // Its factor: 1 / (1 - p) or 0, 1 without dropout (the scale stays a constant-bank operand: a register
  // held through the loop costs spills).
  auto keep_word = [&] { return p.dropout ? sh.keep_lanes[threadIdx.x] : ~0u; };
  auto dropout_factor = [&](uint32_t keep, int nt, int e) {
    return ((keep >> (8 * e + nt)) & 1u) != 0 ? (p.dropout ? p.kept_scale : 1.0f) : 0.0f;
  };
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    dk[nt][0] = dk[nt][1] = dk[nt][2] = dk[nt][3] = 0.0f;
    dv[nt][0] = dv[nt][1] = dv[nt][2] = dv[nt][3] = 0.0f;
  }

  // The first query tile's Q, dC (cp.async), statistics and keep bits; each later tile's are fetched during
  // the tile before it, once that tile's last reads of them are behind a barrier.
  const int first_i0 = query_tile_at(0) * kTile;
  prefetch_query_tiles(q_tile, dc_tile, p, b, h, first_i0);
  store_query_stats(sh, load_query_stats(p, b, bh, first_i0));
  if (p.dropout) draw_keep_lanes(sh.keep_lanes, p, bh, first_i0, j0);

  // No barrier at the top of a tile: the previous tile's last one (before the release) comes after every
  // read of its shared state.
  for (int step = 0; step < tiles; ++step) {
    const int query_tile = query_tile_at(step), i0 = query_tile * kTile;
    const bool has_next = step + 1 < tiles;
    const int next_i0 = has_next ? query_tile_at(step + 1) * kTile : 0;
    const int turn_wanted = adder(step);
    if (positional) load_diagonals_with_ends(sh, p, i0, j0);
    wait_all_copies();
    __syncthreads();
    const bool uniform = positional && sh.diag[0] == sh.diag[kDiagonals - 1];
    if (positional) {
      if (uniform)
        stage_uniform_terms(sh.query_term, sh.key_term, p, head_rows, i0, j0, sh.diag[0]);
      else
        stage_positional_tiles(positional_tiles, p, sh.diag, head_rows, i0, j0);
      __syncthreads();
    }

    // Two passes so that only one 16 x 64 score block is live beside dK and dV at a time: P from S, then
    // dV += P~^T dC, then dP~ and G = P (factor dP~ - D) / s, dK += G^T Q.
    float s[8][4];
    product_with_rows(k_fixed, warp * 16, q_tile, s);  // s[key][query] = K_j . Q_i
    // P = exp(a - m_i) / l_i, +0 outside L x L (key_masked); every score computed and then selected (no
    // branch per element, so the shared-memory reads of all 32 overlap). The same sums as the stored path's:
    // ((S + C2P) + P2C) / s, an absent term skipped.
    auto probabilities = [&](auto terms) {
      uint32_t mask[2][2];
      element_masks(mask);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int kj = local_key[r], qi0 = nt * 8 + 2 * q;
          float2 c2p_pair = make_float2(0.0f, 0.0f), p2c_pair = make_float2(0.0f, 0.0f);
          if constexpr (decltype(terms)::value == ScoreTerms::tiled) {
            // This warp's region, row g + 8r, column 8 (nt ^ (g % 4)) + 2q
            // = 8 ((nt % 4) ^ (g % 4)) + 32 (nt / 4) + 2q: four addresses a thread plus constant offsets.
            const float* row = positional_tiles + warp * kPositionalRegion + (g + 8 * r) * kTile + 2 * q;
            const int column = 8 * ((nt & 3) ^ (g & 3)) + 32 * (nt / 4);
            if (p.c2p != nullptr) c2p_pair = *reinterpret_cast<const float2*>(row + column);
            if (p.p2c != nullptr)
              p2c_pair = *reinterpret_cast<const float2*>(row + kKeysPerWarp * kTile + column);
          }
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const int e = 2 * r + u, il = qi0 + u;
            float a = s[nt][e];
            if constexpr (decltype(terms)::value == ScoreTerms::uniform) {
              a = a + sh.query_term[il] + sh.key_term[kj];
            } else if constexpr (decltype(terms)::value == ScoreTerms::tiled) {
              if (p.c2p != nullptr) a += u == 0 ? c2p_pair.x : c2p_pair.y;
              if (p.p2c != nullptr) a += u == 0 ? p2c_pair.x : p2c_pair.y;
            }
            const float x = element_kept(mask, nt, e) ? a * inverse_scale : key_masked[r];
            s[nt][e] = __expf(x - sh.other_max[il]) * sh.other_inverse[il];
          }
        }
      }
    };
    if (!positional)
      probabilities(std::integral_constant<ScoreTerms, ScoreTerms::content>{});
    else if (uniform)
      probabilities(std::integral_constant<ScoreTerms, ScoreTerms::uniform>{});
    else
      probabilities(std::integral_constant<ScoreTerms, ScoreTerms::tiled>{});
    {
      float p_tilde[8][4];
      const uint32_t keep = keep_word();
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) p_tilde[nt][e] = s[nt][e] * dropout_factor(keep, nt, e);
      }
      accumulate_times_tile(p_tilde, dc_tile, dv);
    }
    // dp[key][query] = V_j . dC_i in two halves of 32 queries (16 registers fewer beside P, dK and dV).
    unrolled<2>([&](auto half) {
      uint32_t mask[2][2];
      element_masks(mask);
      const uint32_t keep = keep_word();
      float dp[4][4];
      product_with_rows<T, 4 * half, 4>(v_fixed, warp * 16, dc_tile, dp);
#pragma unroll
      for (int n = 0; n < 4; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int nt = 4 * half + n, il = nt * 8 + 2 * q + (e & 1);
          // m_i m_j: 0 past L (key_kept, query_bits), so no bounds check.
          const float factor = dropout_factor(keep, nt, e);
          s[nt][e] = element_kept(mask, nt, e)
                         ? s[nt][e] * (factor * dp[n][e] - sh.other_dot[il]) * inverse_scale
                         : 0.0f;
        }
      }
    });
    accumulate_times_tile(s, q_tile, dk);

    // G by key into shared memory (f32): the A operand of dQ's part, and the Gc / Gp bucket sums. Over this
    // warp's positional terms: every lane's reads of them are done (their values fed the products above).
    __syncwarp();
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, il = nt * 8 + 2 * q + (e & 1);
        grad[grad_row(local_key[r]) + il] = s[nt][e];
      }
    }
    if (p.gp != nullptr && uniform) {
      const int c = sh.diag[0];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) sum += s[nt][2 * r] + s[nt][2 * r + 1];
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        sum += __shfl_xor_sync(0xffffffffu, sum, 2);
        const int j = j0 + local_key[r];
        if (q == 0 && j < L) atomicAdd(p.gp + (head_rows + j) * p.window_pitch + c, sum);
      }
    }
    const bool linear = __syncthreads_and(bucket_grads && !uniform && one_distance_step(sh));

    // Q, dC, the statistics and the keep bits are read no more this tile: the next tile's now (the copies in
    // flight through dQ's part, the bucket sums and the wait for this tile's turn; the statistics' loads
    // through the keep bits' Philox rounds).
    if (has_next) prefetch_query_tiles(q_tile, dc_tile, p, b, h, next_i0);
    if (has_next) {
      const QueryStats next_stats = load_query_stats(p, b, bh, next_i0);
      if (p.dropout) draw_keep_lanes(sh.keep_lanes, p, bh, next_i0, j0);
      store_query_stats(sh, next_stats);
    }

    // The first look at this query tile's count goes out now; its round trip overlaps dQ's part.
    const int t = static_cast<int>(threadIdx.x);
    int turn = t == 0 ? load_acquire(order + query_tile) : turn_wanted;
    float dq_part[8][4];  // rows: this warp's 16 queries of the tile
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) dq_part[nt][0] = dq_part[nt][1] = dq_part[nt][2] = dq_part[nt][3] = 0.0f;
    accumulate_transposed_times_tile(grad, kGradPitch, kGradChunkStride, warp * 16, k_fixed, dq_part);

    // Gc of query row i0 + t (t < 64): runs of equal buckets along the keys, summed in key order. A run
    // strictly inside the row's 64 keys is a bucket no other key tile reaches for this row (c is monotone
    // in i - j and each key tile covers its own 64 diagonals of the row): added now, its only addition.
    // The first and last runs (and a uniform tile's one bucket) may be shared with the neighbouring key
    // tiles: added below, in key-tile order.
    EdgeRuns gc_edges;
    if (linear) {
      store_linear_tile_rows(p, grad, sh.diag, head_rows, i0, j0, warp, lane);
    } else if (bucket_grads && t < kTile) {
      if (p.gc != nullptr && i0 + t < L) {
        float* gc_row = p.gc + (head_rows + i0 + t) * p.window_pitch;
        if (uniform) {
          float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains of additions, keys k = 4 m + chain
#pragma unroll
          for (int key = 0; key < kTile; ++key) sum[key % 4] += grad[grad_row(key) + t];
          gc_edges.first_bucket = sh.diag[0];
          gc_edges.first_sum = (sum[0] + sum[1]) + (sum[2] + sum[3]);
        } else {
          gc_edges = add_interior_runs(gc_row, grad + t, sh.diag, t, min(kTile, L - j0));
        }
      }
    } else if (p.gp != nullptr && !uniform && t >= kTile && j0 + t - kTile < L) {
      const int local = t - kTile;
      scatter_bucket_row(p.gp + (head_rows + j0 + local) * p.window_pitch, grad + grad_row(local), 1, sh.diag,
                         local, /*by_query=*/false, min(kTile, L - i0));
    }

    // This query tile's turn: the key tiles before this one (in its order) have added their parts.
    while (turn != turn_wanted) turn = load_acquire(order + query_tile);  // thread 0 only
    __syncthreads();
    float* dq_rows = p.dq_sum + (bh * L + i0) * kD;
    T* dq_out = static_cast<T*>(p.dq) + (b * L + i0) * p.features + h * kD;
    // A row's 8 loads are all issued before its stores (a load after a store to unknown addresses waits
    // for it: 16 round trips to L2 otherwise).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int il = warp * 16 + g + 8 * r;
      if (i0 + il >= L) continue;
      float2* sum = reinterpret_cast<float2*>(dq_rows + il * kD + 2 * q);
      float2 before[8];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        before[nt] = turn_wanted > 0 ? __ldcg(sum + nt * 4) : make_float2(0.0f, 0.0f);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        const float2 value = turn_wanted > 0 ? make_float2(before[nt].x + dq_part[nt][2 * r],
                                                           before[nt].y + dq_part[nt][2 * r + 1])
                                             : make_float2(dq_part[nt][2 * r], dq_part[nt][2 * r + 1]);
        if (turn_wanted == tiles - 1)
          *reinterpret_cast<uint32_t*>(dq_out + il * p.features + nt * 8 + 2 * q) =
              pack2<T>(value.x, value.y);
        else
          __stcg(sum + nt * 4, value);
      }
    }
    if (p.gc != nullptr && t < kTile && i0 + t < L) {
      float* gc_row = p.gc + (head_rows + i0 + t) * p.window_pitch;
      if (gc_edges.first_bucket >= 0) atomicAdd(gc_row + gc_edges.first_bucket, gc_edges.first_sum);
      if (gc_edges.last_bucket >= 0) atomicAdd(gc_row + gc_edges.last_bucket, gc_edges.last_sum);
    }
    // The barrier orders every thread's additions before thread 0's release (cumulative, gpu scope).
    __syncthreads();
    if (t == 0) store_release(order + query_tile, turn_wanted + 1);
  }

  T* dk_out = static_cast<T*>(p.dk);
  T* dv_out = static_cast<T*>(p.dv);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = j0 + local_key[r];
    if (j >= L) continue;
    const int64_t offset = (b * L + j) * p.features + h * kD;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      *reinterpret_cast<uint32_t*>(dk_out + offset + nt * 8 + 2 * q) =
          pack2<T>(dk[nt][2 * r], dk[nt][2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv_out + offset + nt * 8 + 2 * q) =
          pack2<T>(dv[nt][2 * r], dv[nt][2 * r + 1]);
    }
  }
}

}  // namespace

bool flash_backward_rotated_order(int tiles, int resident_ctas, int ranks_on_device) {
  return static_cast<int64_t>(tiles) * std::max(1, ranks_on_device) <= resident_ctas;
}

namespace {
std::atomic<FlashBackwardOrder> backward_order{FlashBackwardOrder::automatic};
}  // namespace
void set_flash_backward_order(FlashBackwardOrder order) {
  backward_order.store(order);
}
FlashBackwardOrder flash_backward_order() {
  return backward_order.load();
}

void launch_flash_attention_backward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream) {
  // stage_positional_tiles addresses a tile's rows by 32-bit offsets below 64 window_pitch.
  ZT_CHECK(static_cast<int64_t>(params.window_pitch) * kTile <= std::numeric_limits<int32_t>::max(),
           "flash_attention_backward: window_pitch ", params.window_pitch, " is over ",
           std::numeric_limits<int32_t>::max() / kTile);
  cuda_detail::dispatch_half(dtype, "flash_attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = static_cast<int64_t>(params.batch) * params.length * params.heads;
    constexpr int kRowsPerBlock = 8;
    flash_row_dot_kernel<T><<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock),
                              kRowsPerBlock * 32, 0, stream>>>(params);
    ZT_CUDA_CHECK_LAUNCH("flash_attention_row_dot");
    // One CTA per (key tile, b, h), in ticket order (a 1-D grid of the same count).
    // All of an SM's shared memory for the kernel (the L1 keeps the rest): kBackwardCtasPerSm CTAs fit.
    auto kernel = flash_attention_backward_kernel<T>;
    const size_t bytes = kFixedTileBytes + kPositionalBytes;
    ZT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    const int tiles = (params.length + kTile - 1) / kTile;
    const auto ctas = static_cast<unsigned>(static_cast<int64_t>(tiles) * params.batch * params.heads);
    int device = 0, sms = 0, per_sm = 0;
    ZT_CUDA_CHECK(cudaGetDevice(&device));
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    ZT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, bytes));
    FlashAttentionParams launched = params;
    launched.rotated_order = flash_backward_order() == FlashBackwardOrder::automatic &&
                             flash_backward_rotated_order(tiles, per_sm * sms, rank_devices_on(device));
    kernel<<<ctas, kThreads, bytes, stream>>>(launched);
    ZT_CUDA_CHECK_LAUNCH("flash_attention_backward");
  });
}

}  // namespace zt::kernels::gpu
