// SPDX-License-Identifier: Apache-2.0
// Philox4x32-10, the counter-based RNG of Salmon et al. (SC'11, "Parallel random numbers: as easy as
// 1, 2, 3"), as curand's curand_init/curand4 (and thus cuDNN's dropout and RNG ops) use it.
//
// Mapping from (seed, subsequence, offset) to bits, identical to curand's Philox4_32_10:
//   key     = { seed & 0xffffffff, seed >> 32 }
//   counter = { block & 0xffffffff, block >> 32, subsequence & 0xffffffff, subsequence >> 32 }
//   where block = offset / 4; the draw is word (offset % 4) of philox(counter, key).
// So a stream (seed, subsequence) is the sequence of 32-bit words w[0], w[1], ... with
// w[4b + j] = philox({b, subsequence}, seed)[j]; `offset` indexes that sequence.
//
// The reference engine's convention for element-wise random tensors (RNG op, dropout masks): element
// with linear (row-major, logical) index i of a tensor draws word  w[offset + i]  of stream
// (seed, subsequence = 0), i.e. block (offset + i) / 4, word (offset + i) % 4.
// Uniform floats are (w + 0.5) * 2^-32, in (0, 1) exclusive of both ends (double precision).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

namespace opendnn {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0];
    const uint64_t p1 = uint64_t(kM1) * c[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

inline PhiloxKey philox_key(uint64_t seed) { return {uint32_t(seed), uint32_t(seed >> 32)}; }

inline PhiloxCounter philox_counter(uint64_t block, uint64_t subsequence) {
  return {uint32_t(block), uint32_t(block >> 32), uint32_t(subsequence), uint32_t(subsequence >> 32)};
}

// Word `offset` of stream (seed, subsequence) (see the mapping above).
inline uint32_t philox_word(uint64_t seed, uint64_t subsequence, uint64_t offset) {
  return philox4x32_10(philox_counter(offset / 4, subsequence), philox_key(seed))[offset % 4];
}

// (w + 0.5) * 2^-32: uniform in (0, 1).
inline double philox_uniform(uint32_t w) { return (double(w) + 0.5) * 0x1p-32; }

// A standard normal from two uniform words by Box-Muller (the first of the pair).
inline double philox_normal(uint32_t w0, uint32_t w1) {
  const double u0 = philox_uniform(w0), u1 = philox_uniform(w1);
  return std::sqrt(-2.0 * std::log(u0)) * std::cos(6.283185307179586476925286766559 * u1);
}

}  // namespace opendnn
