// SPDX-License-Identifier: Apache-2.0
// Reference MATMUL / MATMUL_FP8 kernels against a naive double triple loop.
#include <gtest/gtest.h>

#include <cmath>

#include "engines/reference/gemm.h"
#include "support/ref_harness.h"

using namespace opendnn;

namespace {

TensorPtr t(Graph& g, std::vector<int64_t> dims, DataType dt, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = row_major_strides(dims);
  return g.tensor(TensorAttr().set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt));
}

// Naive batched matmul on logical row-major values with numpy broadcasting of batch dims.
std::vector<double> naive(const std::vector<double>& a, const std::vector<int64_t>& ad, const std::vector<double>& b,
                          const std::vector<int64_t>& bd, std::vector<int64_t>& cd) {
  size_t r = ad.size();
  int64_t M = ad[r - 2], K = ad[r - 1], N = bd[r - 1];
  cd.assign(r, 0);
  for (size_t i = 0; i + 2 < r; ++i) cd[i] = std::max(ad[i], bd[i]);
  cd[r - 2] = M;
  cd[r - 1] = N;
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < r; ++i) batch *= cd[i];
  std::vector<double> c(size_t(batch * M * N));
  for (int64_t bi = 0; bi < batch; ++bi) {
    int64_t rem = bi, oa = 0, ob = 0, sa = 1, sb = 1;
    for (size_t i = r - 2; i-- > 0;) {
      int64_t ix = rem % cd[i];
      rem /= cd[i];
      oa += (ad[i] == 1 ? 0 : ix) * sa;
      ob += (bd[i] == 1 ? 0 : ix) * sb;
      sa *= ad[i];
      sb *= bd[i];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[size_t((oa * M + i) * K + k)] * b[size_t((ob * K + k) * N + j)];
        c[size_t((bi * M + i) * N + j)] = s;
      }
  }
  return c;
}

struct Case {
  std::vector<int64_t> ad, bd;
  DataType at = DataType::FLOAT, bt = DataType::FLOAT, ct = DataType::FLOAT;
  bool a_transposed = false, b_transposed = false;  // storage column-major in the last two dims
};

void check_case(const Case& cs) {
  Graph g;
  auto strides_for = [](std::vector<int64_t> d, bool tr) {
    if (!tr) return row_major_strides(d);
    size_t r = d.size();
    std::swap(d[r - 1], d[r - 2]);
    auto s = row_major_strides(d);
    std::swap(s[r - 1], s[r - 2]);
    return s;
  };
  auto A = t(g, cs.ad, cs.at, strides_for(cs.ad, cs.a_transposed));
  auto B = t(g, cs.bd, cs.bt, strides_for(cs.bd, cs.b_transposed));
  auto C = g.matmul(A, B);
  C->set_output(true).set_data_type(cs.ct);
  test::RefRunner r(g);
  auto av = test::random_values(size_t(test::volume(cs.ad)), 1, -1, 1, cs.at);
  auto bv = test::random_values(size_t(test::volume(cs.bd)), 2, -1, 1, cs.bt);
  r.set(A, av);
  r.set(B, bv);
  Status s = r.run_all();
  ASSERT_TRUE(s.is_good()) << s.get_message();
  std::vector<int64_t> cd;
  auto want = naive(av, cs.ad, bv, cs.bd, cd);
  EXPECT_EQ(C->get_dim(), cd);
  for (double& w : want) w = round_to(cs.ct, w);
  // Double accumulation in another order: results differ from the naive sum by ~K ulps of double, so
  // after rounding to the output type they agree except at rare rounding boundaries (1 ulp).
  double rtol = cs.ct == DataType::FLOAT ? 1.2e-7 : cs.ct == DataType::DOUBLE ? 1e-13 : 1e-2;
  EXPECT_ALL_NEAR(r.get(C), want, 1e-12, rtol);
}

}  // namespace

TEST(RefMatmul, SmallExact) {
  Graph g;
  auto A = t(g, {2, 3}, DataType::FLOAT);
  auto B = t(g, {3, 2}, DataType::FLOAT);
  auto C = g.matmul(A, B);
  C->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  r.set(A, {1, 2, 3, 4, 5, 6});
  r.set(B, {7, 8, 9, 10, 11, 12});
  ASSERT_TRUE(r.run_all().is_good());
  EXPECT_EQ(r.get(C), (std::vector<double>{58, 64, 139, 154}));
}

TEST(RefMatmul, ShapesStridesAndBroadcast) {
  check_case({{37, 53}, {53, 29}});
  check_case({{1, 5, 7}, {1, 7, 3}, DataType::FLOAT, DataType::FLOAT, DataType::DOUBLE, true, false});
  check_case({{2, 1, 13, 17}, {1, 3, 17, 11}, DataType::FLOAT, DataType::FLOAT, DataType::FLOAT, false, true});
  // Several tiles in every dimension and several K blocks.
  check_case({{130, 300}, {300, 401}, DataType::FLOAT, DataType::FLOAT, DataType::FLOAT, true, true});
}

TEST(RefMatmul, LowPrecisionTypes) {
  check_case({{3, 9, 33}, {3, 33, 10}, DataType::HALF, DataType::HALF, DataType::HALF});
  check_case({{9, 33}, {33, 10}, DataType::BFLOAT16, DataType::BFLOAT16, DataType::BFLOAT16, false, true});
  check_case({{9, 33}, {33, 10}, DataType::FP8_E4M3, DataType::FP8_E5M2, DataType::FLOAT});
  check_case({{4, 6}, {6, 5}, DataType::INT8, DataType::INT8, DataType::INT32});
}

TEST(RefMatmul, EveryMicroKernel) {
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    ref::gemm::force_isa(isa);
    check_case({{2, 19, 70}, {1, 70, 45}, DataType::FLOAT, DataType::FLOAT, DataType::DOUBLE, false, true});
  }
  ref::gemm::force_isa("");
}

TEST(RefMatmul, Overrides) {
  Graph g;
  auto A = t(g, {2, 3, 4}, DataType::FLOAT);
  auto B = t(g, {2, 4, 2}, DataType::FLOAT);
  auto mo = t(g, {2, 1, 1}, DataType::INT32);
  auto ko = t(g, {2, 1, 1}, DataType::INT64);
  auto C = g.matmul(A, B, NodeAttrs().input("M_override", mo).input("K_override", ko).set("padding", -7.0));
  C->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  std::vector<double> av(24, 1.0), bv(16, 1.0);
  r.set(A, av);
  r.set(B, bv);
  r.set(mo, {3, 1});
  r.set(ko, {4, 2});
  Status s = r.run_all();
  ASSERT_TRUE(s.is_good()) << s.get_message();
  EXPECT_EQ(r.get(C), (std::vector<double>{4, 4, 4, 4, 4, 4, 2, 2, -7, -7, -7, -7}));
}

TEST(RefMatmul, Fp8ScalesAndAmax) {
  Graph g;
  auto A = t(g, {2, 2}, DataType::FP8_E4M3);
  auto B = t(g, {2, 2}, DataType::FP8_E4M3);
  auto da = t(g, {1, 1}, DataType::FLOAT), db = t(g, {1, 1}, DataType::FLOAT), sc = t(g, {1, 1}, DataType::FLOAT);
  auto [C, amax] = g.matmul_fp8(A, B, da, db, sc);
  C->set_output(true).set_data_type(DataType::FP8_E4M3);
  amax->set_output(true);
  test::RefRunner r(g);
  r.set(A, {1, 2, 3, -4});
  r.set(B, {1, 0, 0, 1});
  r.set(da, {2});
  r.set(db, {0.5});
  r.set(sc, {4});
  Status s = r.run_all();
  ASSERT_TRUE(s.is_good()) << s.get_message();
  EXPECT_EQ(r.get(amax), (std::vector<double>{4}));
  EXPECT_EQ(r.get(C), (std::vector<double>{4, 8, 12, -16}));
}
