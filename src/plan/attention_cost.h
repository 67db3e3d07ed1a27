// SPDX-License-Identifier: Apache-2.0
// A tile-level time model of flash-attention kernels, shared by the engines' cost estimates so that the
// router compares our kernels and cuDNN's in the same terms. Such a kernel keeps a 128-row tile of one
// side resident in a CTA (queries in the forward pass, keys in the backward pass) and visits the other
// side's 128-row blocks that the mask leaves visible; its time is about
//   launch + B*H * (tiles * tile_us + visited blocks * block_us + diagonal blocks * diag_us) / SMs
// (/ the number of tiles when there are fewer tiles than SMs),
// with the per-tile set-up, the per-block work and the extra cost of a masked diagonal block fitted per
// kernel and head dim from H200 measurements (bench/results/sdpa.json, sdpa_bwd.json). A plain flop
// rate cannot rank them: at 512-2048 tokens cuDNN's set-up is cheaper than ours, past 8k ours is faster.
#pragma once

#include <algorithm>
#include <cstdint>

namespace opendnn::cost {

struct AttentionShape {
  int64_t b = 0, h = 0, sq = 0, skv = 0;
  bool causal = false, bottom_right = false;  // a right bound of 0 (the causal mask), and its alignment
  bool keys_resident = false;                 // the backward pass: tiles are key tiles
};

struct TileCost {
  double tile_us = 0, block_us = 0, diag_us = 0;  // per SM
};

inline double attention_us(const AttentionShape& s, const TileCost& c, int sm_count, double launch_us) {
  constexpr int64_t kRows = 128;
  const int64_t nq = (s.sq + kRows - 1) / kRows, nkv = (s.skv + kRows - 1) / kRows;
  double blocks = 0, diag = 0;
  if (!s.causal) {
    blocks = double(nq) * double(nkv);
  } else {
    const int64_t shift = s.bottom_right ? s.skv - s.sq : 0;
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t visible = std::clamp<int64_t>(std::min(s.sq, (i + 1) * kRows) + shift, 0, s.skv);
      const int64_t n = (visible + kRows - 1) / kRows;
      blocks += double(n);
      diag += n > 0 ? 1.0 : 0.0;
    }
  }
  const double tiles = double(s.keys_resident ? nkv : nq);
  const double per_head = tiles * c.tile_us + blocks * c.block_us + diag * c.diag_us;
  // Fewer tiles than SMs run side by side: the time of one tile, not a share of a wave.
  const double lanes = std::clamp(double(s.b) * double(s.h) * tiles, 1.0, double(std::max(sm_count, 1)));
  return launch_us + double(s.b) * double(s.h) * per_head / lanes;
}

}  // namespace opendnn::cost
