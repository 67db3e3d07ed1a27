// SPDX-License-Identifier: Apache-2.0
// The cudnn engine's knob search, as pure functions (no cuDNN types, so CPU tests cover them).
//
// cuDNN's heuristics return engine configs (an engine plus one value per performance knob). Their first
// choice is not always the fastest kernel (a bf16 8192^3 GEMM ran 0.94-0.99x cuBLAS), so autotuning may
// search the knob space around them, as a cuDNN Frontend user building plans with explicit knob choices
// would. Opt-in, because every extra config is a finalized execution plan at propose time:
//   OPENDNN_CUDNN_KNOB_SEARCH=1        adds searched configs to each graph's cudnn plans
//   OPENDNN_CUDNN_KNOB_SEARCH_MAX=<n>  at most n of them per graph (default 64)
// The search: each heuristic config (a base) with ONE knob moved to another value of the range the
// engine reports (min..max by stride), values nearest the base's first; knobs taken in turn, and bases
// too, the heuristics' first choice most often (knob_variants). Two knobs moved at once are not searched.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

namespace opendnn::cudnn::knobs {

using Choices = std::vector<std::pair<int64_t, int64_t>>;  // (cuDNN knob type, value), sorted by type

// An engine config: cuDNN's global engine id and its knob choices.
struct EngineCfg {
  int64_t engine = -1;
  Choices choices;
  bool operator==(const EngineCfg&) const = default;
};

// One knob as the engine's CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR reports it.
struct KnobRange {
  int64_t type = 0, min = 0, max = 0, stride = 1;
};

// A heuristic config and the knob ranges of its engine. `group` keeps configs of different lowerings
// (composite / unified SDPA) apart: the same engine config there is a different plan.
struct SearchBase {
  EngineCfg cfg;
  std::vector<KnobRange> ranges;
  int group = 0;
};

struct Variant {
  size_t base = 0;  // index into the bases
  EngineCfg cfg;
};

inline constexpr size_t kDefaultSearchCap = 64;
// Values tried per knob of a base: the ranges of tile and CTA-count knobs can be wide.
inline constexpr size_t kValuesPerKnob = 16;

// 0 when the search is off, else how many searched configs a graph may get.
inline size_t search_cap(const char* on, const char* max) {
  if (!on || std::atoi(on) <= 0) return 0;
  if (max && std::atoi(max) > 0) return size_t(std::atoi(max));
  return kDefaultSearchCap;
}
inline size_t search_cap_from_env() {
  return search_cap(std::getenv("OPENDNN_CUDNN_KNOB_SEARCH"), std::getenv("OPENDNN_CUDNN_KNOB_SEARCH_MAX"));
}

inline uint64_t fnv1a(const Choices& v) {
  uint64_t h = 1469598103934665603ull;
  for (auto [a, b] : v)
    for (int64_t x : {a, b})
      for (int i = 0; i < 8; ++i) {
        h ^= uint64_t((x >> (8 * i)) & 0xFF);
        h *= 1099511628211ull;
      }
  return h;
}

// engine id * 1000 + FNV-1a of the choices mod 1000 (+1,000,000 for unified SDPA), moved up to the next
// free index on a collision. The caller offers heuristic configs before searched ones, so turning the
// search on never renumbers a heuristic config.
inline int64_t local_index(const EngineCfg& k, bool unified, const std::set<int64_t>& taken) {
  int64_t i = k.engine * 1000 + int64_t(fnv1a(k.choices) % 1000) + (unified ? 1000000 : 0);
  while (taken.count(i)) ++i;
  return i;
}

// The range's values nearest `around` first (ties: the smaller first), at most `limit`. A range cuDNN
// reports empty (max < min) or without a step (stride <= 0) gives none.
inline std::vector<int64_t> knob_values(const KnobRange& r, int64_t around, size_t limit) {
  std::vector<int64_t> out;
  if (r.max < r.min || r.stride <= 0 || limit == 0) return out;
  const uint64_t stride = uint64_t(r.stride);
  const uint64_t last = (uint64_t(r.max) - uint64_t(r.min)) / stride;  // grid indices 0..last
  auto value = [&](uint64_t i) { return int64_t(uint64_t(r.min) + i * stride); };
  auto dist = [&](uint64_t i) {
    int64_t v = value(i);
    return v > around ? uint64_t(v) - uint64_t(around) : uint64_t(around) - uint64_t(v);
  };
  // The grid index at or just below `around`; the nearer of it and the next one comes first.
  uint64_t c = around <= r.min ? 0 : std::min(last, (uint64_t(around) - uint64_t(r.min)) / stride);
  if (c < last && dist(c + 1) < dist(c)) ++c;
  uint64_t lo = c, hi = c;  // [lo, hi]: the indices taken
  out.push_back(value(c));
  while (out.size() < limit && (lo > 0 || hi < last)) {
    bool left = lo > 0 && (hi == last || dist(lo - 1) <= dist(hi + 1));
    if (left) out.push_back(value(--lo));
    else out.push_back(value(++hi));
  }
  return out;
}

// `k` with knob `type` set to `value` (added when absent), choices kept sorted by type.
inline EngineCfg with_knob(EngineCfg k, int64_t type, int64_t value) {
  auto it = std::lower_bound(k.choices.begin(), k.choices.end(), std::make_pair(type, INT64_MIN));
  if (it != k.choices.end() && it->first == type) it->second = value;
  else k.choices.insert(it, {type, value});
  return k;
}

// Searched configs, in a deterministic order. A base's moves cycle over its knobs (the 1st value of each
// knob, then the 2nd, ...). In round r, base b (in heuristic order) takes its next new move when r is a
// multiple of b + 1: the heuristics' favourite is searched most, the k-th config gets a 1/k share.
// Configs equal to a base or to an earlier move are left out. At most `limit`.
inline std::vector<Variant> knob_variants(const std::vector<SearchBase>& bases, size_t limit,
                                          size_t per_knob = kValuesPerKnob) {
  std::vector<std::vector<EngineCfg>> moves(bases.size());
  for (size_t b = 0; b < bases.size(); ++b) {
    const EngineCfg& base = bases[b].cfg;
    std::vector<KnobRange> ranges = bases[b].ranges;
    std::stable_sort(ranges.begin(), ranges.end(), [](const KnobRange& x, const KnobRange& y) { return x.type < y.type; });
    std::vector<std::vector<int64_t>> values;
    for (const KnobRange& r : ranges) {
      auto it = std::find_if(base.choices.begin(), base.choices.end(), [&](auto& c) { return c.first == r.type; });
      bool has = it != base.choices.end();
      std::vector<int64_t> v = knob_values(r, has ? it->second : r.min, per_knob + 1);
      if (has) v.erase(std::remove(v.begin(), v.end(), it->second), v.end());
      if (v.size() > per_knob) v.resize(per_knob);
      values.push_back(std::move(v));
    }
    for (size_t j = 0;; ++j) {
      bool any = false;
      for (size_t r = 0; r < ranges.size(); ++r)
        if (j < values[r].size()) {
          moves[b].push_back(with_knob(base, ranges[r].type, values[r][j]));
          any = true;
        }
      if (!any) break;
    }
  }
  std::vector<Variant> out;
  auto known = [&](int group, const EngineCfg& k) {
    for (const SearchBase& s : bases)
      if (s.group == group && s.cfg == k) return true;
    for (const Variant& v : out)
      if (bases[v.base].group == group && v.cfg == k) return true;
    return false;
  };
  std::vector<size_t> next(bases.size(), 0);
  for (size_t r = 0; out.size() < limit; ++r) {
    bool left = false;
    for (size_t b = 0; b < bases.size() && out.size() < limit; ++b) {
      if (r % (b + 1) == 0)
        while (next[b] < moves[b].size()) {
          const EngineCfg& k = moves[b][next[b]++];
          if (known(bases[b].group, k)) continue;
          out.push_back({b, k});
          break;
        }
      left |= next[b] < moves[b].size();
    }
    if (!left) break;
  }
  return out;
}

}  // namespace opendnn::cudnn::knobs
