// SPDX-License-Identifier: Apache-2.0
// Runs reference kernels of a validated Graph directly on host buffers (no engine, no router).
//
//   Graph g;  ... build tensors and nodes ...
//   test::RefRunner r(g);                    // validates on first run
//   r.set(x, {1, 2, 3, 4});                  // logical values, row-major over x's dims
//   ASSERT_TRUE(r.run_all().is_good());      // every node in insertion order (or r.run(node))
//   std::vector<double> y_vals = r.get(y);   // logical values, row-major
//
// Buffers are allocated per tensor (storage_bytes, honouring strides and data type; FP4 packs two
// per byte) and filled with 0 unless set. Pass-by-value tensors are materialised into a one-element
// buffer of their type (integers at full precision). Virtual tensors get buffers too, so multi-node
// graphs chain. Each kernel gets 64-byte aligned scratch of its scratch_bytes(node).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engines/reference/ref_kernel.h"
#include "opendnn/graph.h"

namespace opendnn::test {

class RefRunner {
 public:
  explicit RefRunner(Graph& g) : g_(g) {}

  // Sets the logical values (row-major over the tensor's dims) through its strides and data type.
  // Validates the graph first if needed (strides of virtual/output tensors are inferred there).
  void set(const TensorPtr& t, const std::vector<double>& values);
  // Logical values, row-major.
  std::vector<double> get(const TensorPtr& t);
  // Raw storage of a tensor (allocated on first use).
  std::vector<std::byte>& bytes(const TensorPtr& t);
  // Fills every byte of a tensor's storage (e.g. 0xff to detect unwritten outputs).
  void fill_bytes(const TensorPtr& t, unsigned char b);

  Status validate();
  // Runs one node's kernel (check, then run). Fails if the op has no kernel.
  Status run(const Node& n);
  Status run_last() { return run(*g_.nodes().back()); }
  Status run_all();

  // Builds the Args for a node on this runner's buffers (for tests that call a kernel themselves).
  ref::Args args_for(const Node& n);

 private:
  ref::View view_of(const TensorPtr& t);
  Graph& g_;
  bool validated_ = false;
  std::map<const TensorAttr*, std::vector<std::byte>> mem_;
  std::vector<std::byte> scratch_;
};

// Deterministic pseudo-random values in [lo, hi), optionally rounded to `t` (so they are exact in it).
std::vector<double> random_values(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0,
                                  DataType t = DataType::DOUBLE);
// Row-major index -> linear helper for expected-value computations.
int64_t volume(const std::vector<int64_t>& dims);
// Max |a - b| / (atol + rtol * |b|) over the elements, > 1 means out of tolerance; NaN == NaN.
double max_rel_violation(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol);

// Validates g and builds its plans on the reference engine only (FALLBACK), whatever other engines
// this build registers.
Status build_reference(Graph& g);

}  // namespace opendnn::test

// gtest helper: EXPECT_ALL_NEAR(got, want, atol, rtol) prints the first mismatching element.
#define EXPECT_ALL_NEAR(got, want, atol, rtol)                                                          \
  do {                                                                                                  \
    const auto& g_ = (got);                                                                             \
    const auto& w_ = (want);                                                                            \
    ASSERT_EQ(g_.size(), w_.size());                                                                    \
    for (size_t i_ = 0; i_ < g_.size(); ++i_) {                                                         \
      if (std::isnan(w_[i_]) && std::isnan(g_[i_])) continue;                                           \
      if (!(std::abs(g_[i_] - w_[i_]) <= (atol) + (rtol) * std::abs(w_[i_]))) {                         \
        ADD_FAILURE() << "element " << i_ << ": got " << g_[i_] << ", want " << w_[i_];                 \
        break;                                                                                          \
      }                                                                                                 \
    }                                                                                                   \
  } while (0)
