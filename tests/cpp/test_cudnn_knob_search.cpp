// SPDX-License-Identifier: Apache-2.0
// The cudnn engine's knob search without cuDNN: knob ranges -> value lists, the order and cap of the
// searched configs, and local indices (stable: a plan cache keys plans by them).
#include <gtest/gtest.h>

#include <climits>

#include "engines/cudnn/knob_search.h"

namespace opendnn::cudnn::knobs {
namespace {

using V = std::vector<int64_t>;

TEST(CudnnKnobSearch, CapFromSwitches) {
  EXPECT_EQ(search_cap(nullptr, nullptr), 0u);
  EXPECT_EQ(search_cap("0", "8"), 0u);
  EXPECT_EQ(search_cap("1", nullptr), kDefaultSearchCap);
  EXPECT_EQ(search_cap("1", "8"), 8u);
  EXPECT_EQ(search_cap("1", "0"), kDefaultSearchCap);
  EXPECT_EQ(search_cap("1", "x"), kDefaultSearchCap);
}

TEST(CudnnKnobSearch, ValuesNearestFirst) {
  EXPECT_EQ(knob_values({2, 0, 10, 1}, 4, 5), (V{4, 3, 5, 2, 6}));
  // Stride 2 (1,3,5,7,9): `around` off the grid; ties go to the smaller value.
  EXPECT_EQ(knob_values({2, 1, 9, 2}, 4, 10), (V{3, 5, 1, 7, 9}));
  EXPECT_EQ(knob_values({2, 1, 9, 2}, 100, 10), (V{9, 7, 5, 3, 1}));
  EXPECT_EQ(knob_values({2, 1, 9, 2}, -5, 2), (V{1, 3}));
  EXPECT_EQ(knob_values({2, 2, 2, 1}, 2, 4), (V{2}));
}

TEST(CudnnKnobSearch, ValuesOfOddRanges) {
  EXPECT_TRUE(knob_values({2, 5, 4, 1}, 4, 4).empty());  // max < min
  EXPECT_TRUE(knob_values({2, 0, 4, 0}, 4, 4).empty());  // no stride
  EXPECT_TRUE(knob_values({2, 0, 4, 1}, 4, 0).empty());
  // A huge range is walked from `around`, never enumerated.
  EXPECT_EQ(knob_values({2, 0, INT64_MAX, 1}, 0, 3), (V{0, 1, 2}));
  EXPECT_EQ(knob_values({2, -3, 3, 3}, 0, 3), (V{0, -3, 3}));
}

TEST(CudnnKnobSearch, WithKnobKeepsChoicesSorted) {
  EngineCfg k{5, {{2, 3}, {14, 4}}};
  EXPECT_EQ(with_knob(k, 14, 6).choices, (Choices{{2, 3}, {14, 6}}));
  EXPECT_EQ(with_knob(k, 1, 0).choices, (Choices{{1, 0}, {2, 3}, {14, 4}}));
  EXPECT_EQ(with_knob(k, 7, 1).choices, (Choices{{2, 3}, {7, 1}, {14, 4}}));
}

// Base A: engine 5, knobs 2 (0..5, at 3) and 14 (2..6, at 4). Base B: engine 7, knob 1 (0..2, unset).
std::vector<SearchBase> two_bases() {
  return {{{5, {{2, 3}, {14, 4}}}, {{14, 2, 6, 1}, {2, 0, 5, 1}}, 0}, {{7, {}}, {{1, 0, 2, 1}}, 0}};
}

TEST(CudnnKnobSearch, VariantsTakeBasesAndKnobsInTurn) {
  auto v = knob_variants(two_bases(), 100);
  ASSERT_EQ(v.size(), 12u);  // A: 5 + 4 moves, B: 3
  // A moves every round, B (the second base) every second round.
  std::vector<size_t> from;
  for (const Variant& x : v) from.push_back(x.base);
  EXPECT_EQ(from, (std::vector<size_t>{0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(v[0].cfg, (EngineCfg{5, {{2, 2}, {14, 4}}}));
  EXPECT_EQ(v[1].cfg, (EngineCfg{7, {{1, 0}}}));
  EXPECT_EQ(v[2].cfg, (EngineCfg{5, {{2, 3}, {14, 3}}}));
  EXPECT_EQ(v[3].cfg, (EngineCfg{5, {{2, 4}, {14, 4}}}));
  EXPECT_EQ(v[4].cfg, (EngineCfg{7, {{1, 1}}}));
  EXPECT_EQ(v[11].cfg, (EngineCfg{5, {{2, 0}, {14, 4}}}));
  for (size_t i = 0; i < v.size(); ++i) {
    for (const SearchBase& b : two_bases()) EXPECT_FALSE(v[i].cfg == b.cfg) << i;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(v[i].cfg == v[j].cfg) << i << " " << j;
  }
}

TEST(CudnnKnobSearch, VariantsCappedAsAPrefix) {
  auto all = knob_variants(two_bases(), 100);
  auto some = knob_variants(two_bases(), 5);
  ASSERT_EQ(some.size(), 5u);
  for (size_t i = 0; i < some.size(); ++i) EXPECT_EQ(some[i].cfg, all[i].cfg);
  EXPECT_TRUE(knob_variants(two_bases(), 0).empty());
  // Per-knob limit: one value per knob.
  EXPECT_EQ(knob_variants(two_bases(), 100, 1).size(), 3u);
}

TEST(CudnnKnobSearch, FirstBasesGetTheLargerShare) {
  std::vector<KnobRange> r = {{2, 0, 20, 1}};
  std::vector<SearchBase> bases = {{{1, {{2, 10}}}, r, 0}, {{2, {{2, 10}}}, r, 0}, {{3, {{2, 10}}}, r, 0}};
  size_t n[3] = {0, 0, 0};
  for (const Variant& v : knob_variants(bases, 11)) ++n[v.base];
  EXPECT_EQ(n[0], 6u);
  EXPECT_EQ(n[1], 3u);
  EXPECT_EQ(n[2], 2u);
  // Without a cap every base's moves all come out (16 values per knob, the base's own left out).
  EXPECT_EQ(knob_variants(bases, 1000).size(), 3 * kValuesPerKnob);
}

TEST(CudnnKnobSearch, VariantsSkipKnownConfigs) {
  // Two heuristic configs of engine 5 one knob apart: neither is offered again as a move of the other,
  // and a move both reach is offered once.
  std::vector<KnobRange> r = {{2, 0, 3, 1}};
  std::vector<SearchBase> bases = {{{5, {{2, 1}}}, r, 0}, {{5, {{2, 2}}}, r, 0}};
  auto v = knob_variants(bases, 100);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].cfg, (EngineCfg{5, {{2, 0}}}));
  EXPECT_EQ(v[1].cfg, (EngineCfg{5, {{2, 3}}}));
  // The same config under another lowering (group) is another plan.
  bases[1] = {{5, {{2, 1}}}, r, 1};
  EXPECT_EQ(knob_variants(bases, 100).size(), 6u);
}

TEST(CudnnKnobSearch, EngineWithoutKnobsGetsNoVariants) {
  EXPECT_TRUE(knob_variants({{{3, {}}, {}, 0}}, 100).empty());
}

TEST(CudnnKnobSearch, LocalIndicesStable) {
  // Pinned: FNV-1a over the (type, value) bytes; a change would orphan every plan-cache entry.
  EXPECT_EQ(fnv1a({}), 1469598103934665603ull);
  EXPECT_EQ(fnv1a({{2, 3}, {14, 4}}), 14777357906293864552ull);
  EngineCfg k{5, {{2, 3}, {14, 4}}};
  EXPECT_EQ(local_index(k, false, {}), 5552);
  EXPECT_EQ(local_index(k, true, {}), 1005552);
  EXPECT_EQ(local_index(k, false, {5552, 5553}), 5554);
  // Heuristic configs take their indices before searched ones: a searched config that collides moves,
  // the heuristic one keeps the index it has without the search.
  std::set<int64_t> taken = {local_index(k, false, {})};
  EXPECT_NE(local_index(k, false, taken), 5552);
}

}  // namespace
}  // namespace opendnn::cudnn::knobs
