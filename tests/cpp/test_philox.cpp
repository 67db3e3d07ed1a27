// SPDX-License-Identifier: Apache-2.0
// Philox4x32-10 against the known-answer vectors of Random123 (Salmon et al., SC'11).
#include <gtest/gtest.h>

#include "common/philox.h"

using namespace opendnn;

TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, StreamMapping) {
  // seed 0, subsequence 0: offsets 0..3 are the first KAT block.
  EXPECT_EQ(philox_word(0, 0, 0), 0x6627e8d5u);
  EXPECT_EQ(philox_word(0, 0, 3), 0x9b00dbd8u);
  // The 64-bit seed splits low word first; the subsequence fills counter words 2 and 3.
  uint64_t seed = 0x299f31d0a4093822ull;
  uint64_t sub = 0x0370734413198a2eull;
  uint64_t block = 0x05a308d3243f6a88ull;
  PhiloxCounter expect = philox4x32_10({0x243f6a88, 0x05a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0});
  for (uint64_t j = 0; j < 4; ++j) EXPECT_EQ(philox_word(seed, sub, block * 4 + j), expect[j]);
  // Offsets within a block and across blocks differ.
  EXPECT_NE(philox_word(7, 0, 4), philox_word(7, 0, 0));
  double u = philox_uniform(0);
  EXPECT_GT(u, 0.0);
  EXPECT_LT(philox_uniform(0xffffffffu), 1.0);
}
