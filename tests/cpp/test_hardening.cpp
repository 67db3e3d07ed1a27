// SPDX-License-Identifier: Apache-2.0
// Hostile and careless use of the C++ API: a graph edited after build, concurrent execute() on one
// built graph, overflowing shapes, values out of their type's range, and strides that would make
// outputs overlap. Each gets a clear error or a right answer, never a crash.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "opendnn/opendnn.h"
#include "support/ref_harness.h"

using namespace opendnn;

namespace {

using test::build_reference;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// y = relu(x * 2 + b): three nodes, two virtual intermediates living in the workspace.
struct SmallGraph {
  Graph g;
  TensorPtr x, b, y;
  explicit SmallGraph(int64_t n) {
    g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    x = g.tensor(TensorAttr().set_name("x").set_dim({1, n}));
    b = g.tensor(TensorAttr().set_name("b").set_dim({1, n}));
    auto two = g.tensor(Scalar::of_float(2.0f));
    two->set_dim({1, 1}).set_stride({1, 1});
    auto m = g.mul(x, two);
    auto s = g.add(m, b);
    y = g.relu(s);
    y->set_output(true).set_name("y");
  }
};

}  // namespace

// ---------------------------------------------------------------- a built graph knows it changed

TEST(Hardening, TensorEditedAfterBuildFailsExecuteNamingIt) {
  SmallGraph s(8);
  ASSERT_TRUE(build_reference(s.g).is_good());
  EXPECT_TRUE(s.g.is_validated());
  std::vector<float> x(8, 1.f), b(8, 0.f), y(8, 0.f);
  std::vector<std::byte> ws(size_t(s.g.get_workspace_size()) + 1);
  ASSERT_TRUE(s.g.execute({{s.x, x.data()}, {s.b, b.data()}, {s.y, y.data()}}, ws.data()).is_good());

  // The user still holds x and grows it: the plans were made for 8 elements.
  s.x->set_dim({1, 4096});
  EXPECT_FALSE(s.g.is_validated());
  Status st = s.g.execute({{s.x, x.data()}, {s.b, b.data()}, {s.y, y.data()}}, ws.data());
  EXPECT_EQ(st.code(), ErrorCode::GRAPH_EXECUTION_FAILED);
  EXPECT_TRUE(contains(st.message(), "graph changed since build")) << st.message();
  EXPECT_TRUE(contains(st.message(), "\"x\"")) << st.message();
  EXPECT_TRUE(contains(st.message(), "dims")) << st.message();
  // The hot path checks too.
  std::vector<void*> slots(s.g.variant_uids().size(), x.data());
  EXPECT_TRUE(contains(s.g.execute(slots.data(), ws.data()).message(), "graph changed since build"));

  // Building again re-validates (x and b no longer broadcast) instead of reusing stale plans.
  Status rebuilt = build_reference(s.g);
  EXPECT_TRUE(rebuilt.is_bad());
  s.b->set_dim({1, 4096});
  // A validate() alone drops the old plans: execute then asks for a build instead of running them.
  ASSERT_TRUE(s.g.validate().is_good());
  EXPECT_TRUE(s.g.execute({{s.x, x.data()}, {s.b, b.data()}, {s.y, y.data()}}, ws.data()).is_bad());
  ASSERT_TRUE(build_reference(s.g).is_good());
  std::vector<float> x2(4096, 3.f), b2(4096, -1.f), y2(4096, 0.f);
  std::vector<std::byte> ws2(size_t(s.g.get_workspace_size()) + 1);
  ASSERT_TRUE(s.g.execute({{s.x, x2.data()}, {s.b, b2.data()}, {s.y, y2.data()}}, ws2.data()).is_good());
  EXPECT_FLOAT_EQ(y2[4095], 5.f);
}

TEST(Hardening, DataTypeStrideAndValueEditsAreNoticed) {
  SmallGraph s(8);
  ASSERT_TRUE(build_reference(s.g).is_good());
  s.y->set_data_type(DataType::HALF);
  EXPECT_FALSE(s.g.is_validated());
  EXPECT_TRUE(contains(s.g.check_unchanged().message(), "data type")) << s.g.check_unchanged().message();

  SmallGraph t(8);
  ASSERT_TRUE(build_reference(t.g).is_good());
  t.x->set_stride({16, 2});
  EXPECT_TRUE(contains(t.g.check_unchanged().message(), "strides"));

  // A pass-by-value constant's value is baked into the plan.
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4}));
  auto c = g.tensor(Scalar::of_float(2.0f));
  auto y = g.mul(x, c);
  y->set_output(true);
  ASSERT_TRUE(build_reference(g).is_good());
  c->set_value(Scalar::of_float(3.0f));
  EXPECT_TRUE(contains(g.check_unchanged().message(), "value"));

  // Setting an attribute to the value it already has is no change; nor is a rename.
  SmallGraph u(8);
  ASSERT_TRUE(build_reference(u.g).is_good());
  u.x->set_dim({1, 8}).set_data_type(DataType::FLOAT).set_name("renamed");
  EXPECT_TRUE(u.g.is_validated());
  // Editing a tensor of another graph leaves this one valid (and it still executes).
  SmallGraph other(8);
  other.x->set_dim({1, 2});
  EXPECT_TRUE(u.g.check_unchanged().is_good());
}

TEST(Hardening, NodeAddedAfterBuildFailsExecute) {
  SmallGraph s(8);
  ASSERT_TRUE(build_reference(s.g).is_good());
  (void)s.g.neg(s.y);
  std::vector<float> x(8), b(8), y(8);
  std::vector<std::byte> ws(size_t(std::max<int64_t>(s.g.get_workspace_size(), 1)));
  Status st = s.g.execute({{s.x, x.data()}, {s.b, b.data()}, {s.y, y.data()}}, ws.data());
  EXPECT_TRUE(contains(st.message(), "graph changed since build")) << st.message();
}

// ---------------------------------------------------------------- concurrent execute on one graph

namespace {

// Runs `threads` x `iters` executes of one built graph, each thread on its own data and workspace,
// through `call` (the hot path or a map overload); returns how many results were wrong.
template <class Call>
int concurrent_wrong_results(SmallGraph& s, int64_t n, int threads, int iters, Call call) {
  std::atomic<int> wrong{0}, failed{0};
  const size_t ws_bytes = size_t(std::max<int64_t>(s.g.get_workspace_size(), 1));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      const size_t len = static_cast<size_t>(n);
      std::vector<float> x(len), b(len), y(len);
      std::vector<std::byte> ws(ws_bytes);
      for (int it = 0; it < iters; ++it) {
        const float base = float(t * 1000 + it);
        for (int64_t i = 0; i < n; ++i) {
          x[size_t(i)] = base + float(i % 7);
          b[size_t(i)] = float(t);
        }
        std::fill(y.begin(), y.end(), -1.f);
        if (call(x.data(), b.data(), y.data(), ws.data()).is_bad()) {
          ++failed;
          continue;
        }
        for (int64_t i = 0; i < n; ++i)
          if (y[size_t(i)] != 2.f * (base + float(i % 7)) + float(t)) {
            ++wrong;
            break;
          }
      }
    });
  for (auto& th : pool) th.join();
  return wrong + failed;
}

}  // namespace

TEST(Hardening, ConcurrentExecuteOnOneGraphHotPath) {
  const int64_t n = 2048;
  SmallGraph s(n);
  ASSERT_TRUE(build_reference(s.g).is_good());
  const auto& uids = s.g.variant_uids();
  auto call = [&](float* x, float* b, float* y, std::byte* ws) {
    void* slots[3];
    for (size_t k = 0; k < uids.size(); ++k)
      slots[k] = uids[k] == s.x->get_uid() ? (void*)x : uids[k] == s.b->get_uid() ? (void*)b : (void*)y;
    return s.g.execute(slots, ws);
  };
  EXPECT_EQ(concurrent_wrong_results(s, n, 8, 150, call), 0);
}

TEST(Hardening, ConcurrentExecuteOnOneGraphMapOverloads) {
  const int64_t n = 2048;
  SmallGraph s(n);
  ASSERT_TRUE(build_reference(s.g).is_good());
  auto by_tensor = [&](float* x, float* b, float* y, std::byte* ws) {
    return s.g.execute({{s.x, x}, {s.b, b}, {s.y, y}}, ws);
  };
  EXPECT_EQ(concurrent_wrong_results(s, n, 8, 100, by_tensor), 0);
  auto by_index = [&](float* x, float* b, float* y, std::byte* ws) {
    return s.g.execute_plan_at_index({{s.x->get_uid(), x}, {s.b->get_uid(), b}, {s.y->get_uid(), y}}, ws, 0);
  };
  EXPECT_EQ(concurrent_wrong_results(s, n, 8, 100, by_index), 0);
}

// ---------------------------------------------------------------- checked arithmetic

namespace {

TensorPtr input(Graph& g, const char* name, std::vector<int64_t> dims, DataType dt = DataType::FLOAT) {
  return g.tensor(TensorAttr().set_name(name).set_dim(std::move(dims)).set_data_type(dt));
}

Status validate_conv(std::vector<int64_t> x, std::vector<int64_t> w, NodeAttrs attrs) {
  Graph g;
  auto y = g.conv_fprop(input(g, "x", std::move(x)), input(g, "w", std::move(w)), std::move(attrs));
  y->set_output(true);
  return g.validate();
}

}  // namespace

TEST(Hardening, ConvWithZeroChannelsIsAnErrorNotADivisionByZero) {
  Status s = validate_conv({1, 0, 8, 8}, {4, 1, 3, 3}, NodeAttrs());
  EXPECT_EQ(s.code(), ErrorCode::SHAPE_DEDUCTION_FAILED);
  EXPECT_TRUE(contains(s.message(), "0 channels")) << s.message();
  // A zero batch is fine: the output is empty.
  Graph g;
  auto y = g.conv_fprop(input(g, "x", {0, 2, 8, 8}), input(g, "w", {4, 2, 3, 3}));
  y->set_output(true);
  ASSERT_TRUE(g.validate().is_good());
  EXPECT_EQ(y->get_dim(), (std::vector<int64_t>{0, 4, 6, 6}));
}

TEST(Hardening, ConvWithHugeDilationOrPaddingIsAnError) {
  const int64_t big = int64_t(1) << 62;
  for (NodeAttrs a : {NodeAttrs().set("dilation", std::vector<int64_t>{big, 1}),
                      NodeAttrs().set("pre_padding", std::vector<int64_t>{big, 0}).set("post_padding", std::vector<int64_t>{big, 0}),
                      NodeAttrs().set("pre_padding", std::vector<int64_t>{INT64_MAX, 0})}) {
    Status s = validate_conv({1, 1, 8, 8}, {1, 1, 3, 3}, a);
    EXPECT_EQ(s.code(), ErrorCode::INVALID_VALUE) << s.message();
    EXPECT_TRUE(contains(s.message(), "overflows int64")) << s.message();
  }
  // Large but representable: a dilation too wide for the image is a shape error, not a wrong size.
  Status s = validate_conv({1, 1, 8, 8}, {1, 1, 3, 3}, NodeAttrs().set("dilation", std::vector<int64_t>{int64_t(1) << 40, 1}));
  EXPECT_EQ(s.code(), ErrorCode::SHAPE_DEDUCTION_FAILED) << s.message();

  // dgrad's inferred input size: (o - 1) * stride overflows.
  Graph g;
  auto dx = g.conv_dgrad(input(g, "dy", {1, 1, 4, 4}), input(g, "w", {1, 1, 3, 3}),
                         NodeAttrs().set("stride", std::vector<int64_t>{big, 1}));
  dx->set_output(true);
  Status d = g.validate();
  EXPECT_TRUE(contains(d.message(), "overflows int64")) << d.message();
}

TEST(Hardening, LayoutOpsCheckTheirArithmetic) {
  const int64_t big = int64_t(1) << 62;
  {  // reshape: the product of the target dims overflows
    Graph g;
    auto y = g.reshape(input(g, "x", {4, 4}), NodeAttrs().set("dims", std::vector<int64_t>{big, 8, -1}));
    y->set_output(true);
    Status s = g.validate();
    EXPECT_TRUE(contains(s.message(), "overflow")) << s.message();
  }
  {  // slice with a huge stride: one element, no overflow in the length
    Graph g;
    auto y = g.slice(input(g, "x", {8, 3}), NodeAttrs()
                                                .set("start", std::vector<int64_t>{1})
                                                .set("end", std::vector<int64_t>{INT64_MAX})
                                                .set("stride", std::vector<int64_t>{INT64_MAX}));
    y->set_output(true);
    ASSERT_TRUE(g.validate().is_good());
    EXPECT_EQ(y->get_dim(), (std::vector<int64_t>{1, 3}));
  }
  {  // concatenate: the summed length overflows int64
    Graph g;
    std::vector<TensorPtr> parts;
    for (int i = 0; i < 9; ++i)
      parts.push_back(input(g, ("p" + std::to_string(i)).c_str(), {int64_t(1) << 60}, DataType::UINT8));
    auto y = g.concatenate(parts, NodeAttrs().set("axis", int64_t(0)));
    y->set_output(true);
    Status s = g.validate();
    EXPECT_TRUE(contains(s.message(), "overflows int64")) << s.message();
  }
  // A tensor whose span overflows is refused when sized.
  TensorAttr t;
  t.set_dim({3, 3}).set_stride({INT64_MAX / 2, 1}).set_data_type(DataType::FLOAT);
  EXPECT_EQ(t.storage_elements(), -1);
  t.set_dim({int64_t(1) << 32, int64_t(1) << 32});
  EXPECT_EQ(t.volume(), -1);
  t.set_dim({int64_t(1) << 32, 0, int64_t(1) << 32});
  EXPECT_EQ(t.volume(), 0);
}

// ---------------------------------------------------------------- values checked where they enter

TEST(Hardening, NegativeEpsilonIsRejected) {
  for (float e : {-1.0f, std::numeric_limits<float>::quiet_NaN()}) {
    Graph g;
    auto [y, mean, iv] = g.layernorm(input(g, "x", {2, 4, 8}), input(g, "s", {1, 4, 8}), input(g, "b", {1, 4, 8}),
                                     g.tensor(Scalar::of_float(e)), NodeAttrs().set_name("ln"));
    y->set_output(true);
    Status s = g.validate();
    EXPECT_EQ(s.code(), ErrorCode::INVALID_VALUE) << s.message();
    EXPECT_TRUE(contains(s.message(), "epsilon")) << s.message();
  }
  Graph g;
  auto [y, iv] = g.rmsnorm(input(g, "x", {2, 4, 8}), input(g, "s", {1, 4, 8}), g.tensor(Scalar::of_float(0.0f)));
  y->set_output(true);
  EXPECT_TRUE(g.validate().is_good());
}

TEST(Hardening, OutputStridesThatOverlapAreRejected) {
  auto check = [](std::vector<int64_t> dims, std::vector<int64_t> strides) {
    Graph g;
    auto y = g.relu(input(g, "x", dims));
    y->set_output(true).set_name("y").set_stride(std::move(strides));
    return g.validate();
  };
  Status zero = check({4, 8}, {0, 1});
  EXPECT_TRUE(contains(zero.message(), "share memory")) << zero.message();
  EXPECT_TRUE(contains(zero.message(), "\"y\"")) << zero.message();
  Status overlap = check({4, 8}, {4, 1});
  EXPECT_TRUE(contains(overlap.message(), "share memory")) << overlap.message();
  EXPECT_TRUE(check({4, 8}, {1, 4}).is_good());      // column-major
  EXPECT_TRUE(check({4, 8}, {16, 1}).is_good());     // padded rows
  EXPECT_TRUE(check({4, 1}, {1, 0}).is_good());      // a dim of 1 takes any stride
  EXPECT_TRUE(check({0, 8}, {0, 0}).is_good());      // nothing to write
  // Inputs may broadcast with stride 0; a virtual intermediate is laid out by the graph.
  Graph g;
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4, 8}).set_stride({0, 1}).set_data_type(DataType::FLOAT));
  auto y = g.relu(x);
  y->set_output(true);
  EXPECT_TRUE(g.validate().is_good());
}

TEST(Hardening, DimsAndStridesAreChecked) {
  Graph g;
  auto y = g.relu(g.tensor(TensorAttr().set_name("x").set_dim({4, -2}).set_data_type(DataType::FLOAT)));
  y->set_output(true);
  Status s = g.validate();
  EXPECT_TRUE(contains(s.message(), "negative dim")) << s.message();
  Graph h;
  auto z = h.relu(h.tensor(TensorAttr().set_name("x").set_dim({4, 2}).set_stride({2, 1, 1}).set_data_type(DataType::FLOAT)));
  z->set_output(true);
  Status r = h.validate();
  EXPECT_TRUE(contains(r.message(), "2 dims but 3 strides")) << r.message();
}

TEST(Hardening, ScalarValuesMustFitTheirDataType) {
  auto check = [](Scalar v, DataType dt) {
    Graph g;
    auto c = g.tensor(v);
    c->set_data_type(dt);
    auto y = g.add(input(g, "x", {1}), c);
    y->set_output(true);
    return g.validate();
  };
  Status big = check(Scalar::of_int64(int64_t(1) << 40), DataType::INT32);
  EXPECT_EQ(big.code(), ErrorCode::INVALID_VALUE);
  EXPECT_TRUE(contains(big.message(), "outside the range of INT32")) << big.message();
  EXPECT_TRUE(contains(check(Scalar::of_int64(7), DataType::BOOLEAN).message(), "outside the range of BOOLEAN"));
  EXPECT_TRUE(check(Scalar::of_int64(-129), DataType::INT8).is_bad());
  EXPECT_TRUE(check(Scalar::of_int64(256), DataType::UINT8).is_bad());
  EXPECT_TRUE(contains(check(Scalar::of_double(2.5), DataType::INT32).message(), "not an integer"));
  EXPECT_TRUE(check(Scalar::of_double(std::nan("")), DataType::INT64).is_bad());
  EXPECT_TRUE(check(Scalar::of_int64(1), DataType::BOOLEAN).is_good());
  EXPECT_TRUE(check(Scalar::of_double(-3.0), DataType::INT32).is_good());
  EXPECT_TRUE(check(Scalar::of_int64(INT64_MAX), DataType::INT64).is_good());
  // Floating types take NaN and infinities.
  EXPECT_TRUE(check(Scalar::of_float(std::numeric_limits<float>::infinity()), DataType::FLOAT).is_good());
  EXPECT_TRUE(check(Scalar::of_double(std::nan("")), DataType::HALF).is_good());
}

// ---------------------------------------------------------------- allocation failures

#if defined(__SANITIZE_ADDRESS__)
#define OPENDNN_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OPENDNN_TEST_UNDER_ASAN 1
#endif
#endif

TEST(Hardening, AllocationFailureIsAnErrorNamingWhatAndHowMuch) {
#ifdef OPENDNN_TEST_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer aborts on impossible allocation sizes instead of failing them";
#else
  // A 1-D convolution over 2^58 positions: its table of positions alone needs 2^61 bytes.
  Graph g;
  g.set_compute_data_type(DataType::FLOAT);
  auto x = input(g, "x", {1, 1, int64_t(1) << 58}, DataType::UINT8);
  auto y = g.conv_fprop(x, input(g, "w", {1, 1, 1}, DataType::UINT8));
  y->set_output(true).set_data_type(DataType::UINT8);
  ASSERT_TRUE(build_reference(g).is_good());
  std::vector<unsigned char> small(64);
  std::vector<void*> slots(g.variant_uids().size(), small.data());
  std::vector<std::byte> ws(size_t(std::max<int64_t>(g.get_workspace_size(), 1)));
  Status s = g.execute(slots.data(), ws.data());
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_EXECUTION_FAILED);
  EXPECT_TRUE(contains(s.message(), "out of memory while executing")) << s.message();
  EXPECT_TRUE(contains(s.message(), std::to_string(uint64_t(1) << 61) + " bytes")) << s.message();
#endif
}

// Zero-size dims: validation accepts them and the reference plans run without touching memory (an
// empty output stays untouched; a matmul over K = 0 gives zeros).
TEST(Hardening, ZeroSizeTensorsBuildAndExecute) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = input(g, "x", {0, 8});
  auto r = g.relu(x);
  r->set_output(true).set_name("r");
  auto c = g.conv_fprop(input(g, "img", {0, 2, 5, 5}), input(g, "w", {3, 2, 3, 3}));
  c->set_output(true).set_name("c");
  auto m = g.matmul(input(g, "a", {1, 4, 0}), input(g, "b", {1, 0, 3}));
  m->set_output(true).set_name("m");
  ASSERT_TRUE(build_reference(g).is_good());
  std::vector<float> one(4, 7.f), mm(12, 5.f);
  std::unordered_map<TensorPtr, void*> pack;
  for (const auto& t : g.tensors())
    if (g.variant_slot_of(t->get_uid()) >= 0) pack[t] = t == m ? mm.data() : one.data();
  std::vector<std::byte> ws(size_t(std::max<int64_t>(g.get_workspace_size(), 1)));
  Status s = g.execute(pack, ws.data());
  ASSERT_TRUE(s.is_good()) << s.message();
  EXPECT_EQ(one, std::vector<float>(4, 7.f));
  EXPECT_EQ(mm, std::vector<float>(12, 0.f));
}
