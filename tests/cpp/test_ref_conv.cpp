// SPDX-License-Identifier: Apache-2.0
// Reference CONV_FPROP / CONV_DGRAD / CONV_WGRAD kernels against one naive loop over every term
// Y[n,k,o] += W[k,c,r~] * X[n,c,x] (which also defines DX and DW by scattering).
#include <gtest/gtest.h>

#include <cmath>

#include "support/ref_harness.h"

using namespace opendnn;

namespace {

using Dims = std::vector<int64_t>;

struct Spec {
  int64_t N, C, K, G;
  Dims in, k, pre, post, stride, dil;
  bool conv_mode = false;
  bool nhwc = false;  // channels-last strides for X/Y/W
  DataType dt = DataType::FLOAT;
};

Dims out_dims(const Spec& s) {
  Dims o;
  for (size_t d = 0; d < s.in.size(); ++d)
    o.push_back((s.in[d] + s.pre[d] + s.post[d] - s.dil[d] * (s.k[d] - 1) - 1) / s.stride[d] + 1);
  return o;
}

Dims strides_for(const Dims& dims, bool channels_last) {
  if (!channels_last) return row_major_strides(dims);
  // order: N, spatial..., C
  Dims perm_dims{dims[0]};
  for (size_t i = 2; i < dims.size(); ++i) perm_dims.push_back(dims[i]);
  perm_dims.push_back(dims[1]);
  Dims ps = row_major_strides(perm_dims);
  Dims s(dims.size());
  s[0] = ps[0];
  s[1] = ps.back();
  for (size_t i = 2; i < dims.size(); ++i) s[i] = ps[i - 1];
  return s;
}

Dims cat(Dims a, const Dims& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Linear row-major index of (a, b, spatial...) in dims.
int64_t at(const Dims& dims, int64_t a, int64_t b, const Dims& sp) {
  int64_t l = a * dims[1] + b;
  for (size_t d = 0; d < sp.size(); ++d) l = l * dims[2 + d] + sp[d];
  return l;
}

void naive(const Spec& s, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& dy,
           std::vector<double>& y, std::vector<double>& dx, std::vector<double>& dw) {
  Dims od = out_dims(s);
  Dims xd = cat({s.N, s.C}, s.in), wd = cat({s.K, s.C / s.G}, s.k), yd = cat({s.N, s.K}, od);
  y.assign(size_t(test::volume(yd)), 0);
  dx.assign(size_t(test::volume(xd)), 0);
  dw.assign(size_t(test::volume(wd)), 0);
  const int64_t Cg = s.C / s.G, Kg = s.K / s.G;
  ref::for_each_index(od, [&](const int64_t* o, int64_t) {
    ref::for_each_index(s.k, [&](const int64_t* r, int64_t) {
      Dims xs(s.in.size()), rt(s.in.size()), os(o, o + s.in.size());
      for (size_t d = 0; d < s.in.size(); ++d) {
        xs[d] = o[d] * s.stride[d] - s.pre[d] + r[d] * s.dil[d];
        if (xs[d] < 0 || xs[d] >= s.in[d]) return;
        rt[d] = s.conv_mode ? s.k[d] - 1 - r[d] : r[d];
      }
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t k = 0; k < s.K; ++k)
          for (int64_t c = 0; c < Cg; ++c) {
            int64_t g = k / Kg;
            int64_t xi = at(xd, n, g * Cg + c, xs), wi = at(wd, k, c, rt), yi = at(yd, n, k, os);
            y[size_t(yi)] += w[size_t(wi)] * x[size_t(xi)];
            dx[size_t(xi)] += w[size_t(wi)] * dy[size_t(yi)];
            dw[size_t(wi)] += dy[size_t(yi)] * x[size_t(xi)];
          }
    });
  });
}

void check(const Spec& s) {
  Dims od = out_dims(s);
  Dims xd = cat({s.N, s.C}, s.in), wd = cat({s.K, s.C / s.G}, s.k), yd = cat({s.N, s.K}, od);
  auto xv = test::random_values(size_t(test::volume(xd)), 11, -1, 1, s.dt);
  auto wv = test::random_values(size_t(test::volume(wd)), 12, -1, 1, s.dt);
  auto dyv = test::random_values(size_t(test::volume(yd)), 13, -1, 1, s.dt);
  std::vector<double> y, dx, dw;
  naive(s, xv, wv, dyv, y, dx, dw);
  NodeAttrs a;
  a.set("pre_padding", s.pre).set("post_padding", s.post).set("stride", s.stride).set("dilation", s.dil);
  if (s.conv_mode) a.set("convolution_mode", "CONVOLUTION");
  auto mk = [&](Graph& g, const Dims& d) {
    return g.tensor(TensorAttr().set_dim(d).set_stride(strides_for(d, s.nhwc)).set_data_type(s.dt));
  };
  const double rtol = s.dt == DataType::FLOAT ? 2e-7 : 2e-3;
  {
    Graph g;
    auto X = mk(g, xd), W = mk(g, wd);
    auto Y = g.conv_fprop(X, W, a);
    Y->set_output(true).set_data_type(DataType::FLOAT).set_stride(strides_for(yd, s.nhwc));
    test::RefRunner r(g);
    r.set(X, xv);
    r.set(W, wv);
    Status st = r.run_all();
    ASSERT_TRUE(st.is_good()) << st.get_message();
    EXPECT_EQ(Y->get_dim(), yd);
    EXPECT_ALL_NEAR(r.get(Y), y, 1e-6, rtol);
  }
  {
    Graph g;
    auto DY = mk(g, yd), W = mk(g, wd);
    auto DX = g.conv_dgrad(DY, W, a);
    DX->set_output(true).set_data_type(DataType::FLOAT).set_dim(xd).set_stride(strides_for(xd, s.nhwc));
    test::RefRunner r(g);
    r.set(DY, dyv);
    r.set(W, wv);
    Status st = r.run_all();
    ASSERT_TRUE(st.is_good()) << st.get_message();
    EXPECT_ALL_NEAR(r.get(DX), dx, 1e-6, rtol);
  }
  {
    Graph g;
    auto X = mk(g, xd), DY = mk(g, yd);
    auto DW = g.conv_wgrad(X, DY, a);
    DW->set_output(true).set_data_type(DataType::FLOAT).set_dim(wd).set_stride(strides_for(wd, s.nhwc));
    test::RefRunner r(g);
    r.set(X, xv);
    r.set(DY, dyv);
    Status st = r.run_all();
    ASSERT_TRUE(st.is_good()) << st.get_message();
    EXPECT_ALL_NEAR(r.get(DW), dw, 1e-6, rtol);
  }
}

}  // namespace

TEST(RefConv, HandComputed1D) {
  Graph g;
  auto X = g.tensor(TensorAttr().set_dim({1, 1, 4}).set_stride({4, 4, 1}).set_data_type(DataType::FLOAT));
  auto W = g.tensor(TensorAttr().set_dim({1, 1, 2}).set_stride({2, 2, 1}).set_data_type(DataType::FLOAT));
  auto Y = g.conv_fprop(X, W, NodeAttrs().set("pre_padding", {1}).set("post_padding", {0}).set("stride", {1}).set("dilation", {1}));
  Y->set_output(true).set_data_type(DataType::FLOAT);
  auto Y2 = g.conv_fprop(X, W, NodeAttrs().set("pre_padding", {0}).set("post_padding", {0}).set("stride", {2}).set("dilation", {1}).set("convolution_mode", "CONVOLUTION"));
  Y2->set_output(true).set_data_type(DataType::FLOAT);
  test::RefRunner r(g);
  r.set(X, {1, 2, 3, 4});
  r.set(W, {10, 1});
  Status st = r.run_all();
  ASSERT_TRUE(st.is_good()) << st.get_message();
  // y[o] = w0*x[o-1] + w1*x[o]
  EXPECT_EQ(r.get(Y), (std::vector<double>{1, 12, 23, 34}));
  // flipped kernel (1, 10), stride 2: y[0] = 1*1 + 10*2, y[1] = 1*3 + 10*4
  EXPECT_EQ(r.get(Y2), (std::vector<double>{21, 43}));
}

TEST(RefConv, Conv2D) {
  check({2, 4, 6, 2, {7, 6}, {3, 2}, {1, 0}, {2, 1}, {2, 1}, {1, 2}});
  check({1, 3, 4, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, true, true});
}

TEST(RefConv, Conv1DAnd3D) {
  check({2, 2, 3, 1, {9}, {3}, {2}, {0}, {3}, {2}});
  check({1, 2, 2, 2, {4, 3, 5}, {2, 1, 3}, {0, 1, 1}, {1, 0, 1}, {1, 2, 2}, {1, 1, 1}, false, true});
}

TEST(RefConv, HalfInputs) { check({1, 4, 4, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false, false, DataType::HALF}); }

TEST(RefConv, BiggerThanOneGemmTile) {
  // GEMM dims beyond one tile (M 100 > 96 rows, K 8*3*3=72, N 14*14=196) and several threads.
  check({2, 8, 100, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, false, true});
}
