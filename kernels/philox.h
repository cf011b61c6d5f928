// Philox4x32-10 counter-based RNG (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11)
// and the uniform/keep-mask helpers every dropout site uses.
//
// Why counter-based: a dropout keep-mask must be reproducible in backward without storing it, and must be
// identical on CPU and GPU. Philox maps (counter, key) -> 4 random words with no state, so element i of a
// dropout site is a pure function of (seed, site_id, i):
//
//   key     = { lo32(seed), hi32(seed) }
//   counter = { lo32(i / 4), hi32(i / 4), lo32(site_id), hi32(site_id) }
//   word    = philox4x32_10(counter, key)[i % 4]
//   uniform = (word >> 8) * 2^-24                       in [0, 1), exactly representable in f32
//   keep    = uniform >= p                              kept values are scaled by 1 / (1 - p)
//
// Four consecutive indices share one Philox block, so a GPU thread (or a CPU loop) handling 4 elements runs
// the 10 rounds once. The attention probabilities (L^2 a head) use 16 bits an element instead: see
// attention_keep at the end. All functions are ZT_HOST_DEVICE so the same code compiles into CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#ifndef ZT_HOST_DEVICE
#ifdef __CUDACC__
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif
#endif

namespace zt::kernels {

struct PhiloxCounter {
  uint32_t word[4];
};
struct PhiloxKey {
  uint32_t word[2];
};

namespace philox_detail {
// Round multipliers and Weyl key increments from the Philox paper (Random123 PHILOX_M4x32_*, PHILOX_W32_*).
inline constexpr uint32_t kMultiplier0 = 0xD2511F53u;
inline constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

ZT_HOST_DEVICE inline void multiply_high_low(uint32_t a, uint32_t b, uint32_t& high, uint32_t& low) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  high = static_cast<uint32_t>(product >> 32);
  low = static_cast<uint32_t>(product);
}

ZT_HOST_DEVICE inline PhiloxCounter philox_round(PhiloxCounter c, PhiloxKey k) {
  uint32_t high0, low0, high1, low1;
  multiply_high_low(kMultiplier0, c.word[0], high0, low0);
  multiply_high_low(kMultiplier1, c.word[2], high1, low1);
  return PhiloxCounter{{high1 ^ c.word[1] ^ k.word[0], low1, high0 ^ c.word[3] ^ k.word[1], low0}};
}
}  // namespace philox_detail

// The Philox4x32 bijection with 10 rounds; the key is bumped by the Weyl constants between rounds.
ZT_HOST_DEVICE inline PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.word[0] += philox_detail::kWeyl0;
      key.word[1] += philox_detail::kWeyl1;
    }
    counter = philox_detail::philox_round(counter, key);
  }
  return counter;
}

// The top 24 bits as a float in [0, 1): every value k * 2^-24 is exact in f32, so CPU and GPU agree.
ZT_HOST_DEVICE inline float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// The Philox block holding indices [4 * block, 4 * block + 4) of dropout site `site_id`.
ZT_HOST_DEVICE inline PhiloxCounter philox_block(uint64_t seed, uint64_t site_id, uint64_t block) {
  const PhiloxKey key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const PhiloxCounter counter{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               static_cast<uint32_t>(site_id), static_cast<uint32_t>(site_id >> 32)}};
  return philox4x32_10(counter, key);
}

// The blocks block[0 .. N) of one site, the same words as philox_block of each, computed round by round: one
// key schedule for all N and N independent rounds to interleave (the GPU flash attention draws several
// blocks a thread this way).
template <int N>
ZT_HOST_DEVICE inline void philox_blocks(uint64_t seed, uint64_t site_id, const uint64_t (&block)[N],
                                         PhiloxCounter (&out)[N]) {
#ifdef __CUDA_ARCH__
#pragma unroll  // the N x 4 words stay in registers
#endif
  for (int n = 0; n < N; ++n) {
    out[n] = PhiloxCounter{{static_cast<uint32_t>(block[n]), static_cast<uint32_t>(block[n] >> 32),
                            static_cast<uint32_t>(site_id), static_cast<uint32_t>(site_id >> 32)}};
  }
  PhiloxKey key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.word[0] += philox_detail::kWeyl0;
      key.word[1] += philox_detail::kWeyl1;
    }
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int n = 0; n < N; ++n) out[n] = philox_detail::philox_round(out[n], key);
  }
}

// Blocks first, first + stride, ..., first + (N - 1) stride of one site.
template <int N>
ZT_HOST_DEVICE inline void philox_blocks(uint64_t seed, uint64_t site_id, uint64_t first, uint64_t stride,
                                         PhiloxCounter (&out)[N]) {
  uint64_t block[N];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int n = 0; n < N; ++n) block[n] = first + stride * static_cast<uint64_t>(n);
  philox_blocks<N>(seed, site_id, block, out);
}

// uniform(seed, site_id, index) in [0, 1): the random number behind element `index` of a dropout site.
ZT_HOST_DEVICE inline float uniform(uint64_t seed, uint64_t site_id, uint64_t index) {
  return uniform_from_bits(philox_block(seed, site_id, index >> 2).word[index & 3]);
}

// The attention probabilities' draw. P has L^2 elements a head (64 M at 8k tokens), so a Philox block serves
// 8 of them, 16 bits each, half the rounds a score of the 24-bit draw above; and its rows are numbered as if
// padded to a multiple of 8 keys, so that every block lies in one row whatever L (a thread drawing 8 keys of
// a row runs one block, never two):
//   e(row, j) = row * attention_row_pitch(L) + j        row = (b N + h) L + i, the row of P[b, h, i, :]
//   half(e)   = bits 16 (e % 2) .. + 15 of word (e % 8) / 2 of philox_block(seed, site_id, e / 8)
//   keep(e)   = half(e) >= attention_keep_threshold(p) = ceil(p 2^16)
// The drop probability is p rounded up to a multiple of 2^-16 (0.1 drops with probability 0.1000061); kept
// values are scaled by 1 / (1 - p) as at every other site. p 2^16 is exact in f32, so CPU and GPU agree.
ZT_HOST_DEVICE inline uint64_t attention_row_pitch(uint64_t length) {
  return (length + 7) / 8 * 8;
}
ZT_HOST_DEVICE inline uint32_t attention_keep_threshold(float p) {
  return static_cast<uint32_t>(ceilf(p * 65536.0f));
}

// Half k (0..7) of a block; the words are picked with constant indices (on the GPU a run-time index into
// the block would put it in local memory).
ZT_HOST_DEVICE inline uint32_t half_of(const PhiloxCounter& block, uint32_t k) {
  uint32_t word = block.word[3];
  switch ((k >> 1) & 3u) {
    case 0:
      word = block.word[0];
      break;
    case 1:
      word = block.word[1];
      break;
    case 2:
      word = block.word[2];
      break;
    default:
      break;
  }
  return (k & 1u) ? word >> 16 : word & 0xffffu;
}

// Bit k (0..7) set where the block keeps element 8 (block) + k.
ZT_HOST_DEVICE inline uint32_t attention_keep_bits(const PhiloxCounter& block, uint32_t threshold) {
  uint32_t bits = 0;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int w = 0; w < 4; ++w) {
    bits |= ((block.word[w] & 0xffffu) >= threshold ? 1u : 0u) << (2 * w);
    bits |= ((block.word[w] >> 16) >= threshold ? 1u : 0u) << (2 * w + 1);
  }
  return bits;
}

// Whether the attention dropout of `site_id` keeps element `index` of P.
ZT_HOST_DEVICE inline bool attention_keep(uint64_t seed, uint64_t site_id, uint64_t index,
                                          uint32_t threshold) {
  return half_of(philox_block(seed, site_id, index >> 3), static_cast<uint32_t>(index & 7)) >= threshold;
}

}  // namespace zt::kernels
