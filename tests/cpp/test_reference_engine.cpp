// SPDX-License-Identifier: Apache-2.0
// The reference engine end to end: graphs built, planned, executed on host memory and checked
// against hand-computed values.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "common/dtype_convert.h"
#include "engines/reference/kern_util.h"
#include "engines/reference/ref_kernel.h"
#include "opendnn/opendnn.h"
#include "support/ref_harness.h"

using namespace opendnn;

namespace {

using test::build_reference;

std::vector<std::byte> workspace_for(const Graph& g) {
  return std::vector<std::byte>(size_t(std::max<int64_t>(g.get_workspace_size(), 1)));
}

}  // namespace

TEST(ReferenceEngine, AddReluWithAConstant) {
  if (!ref::kernel_for(OpKind::POINTWISE)) GTEST_SKIP() << "no POINTWISE reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, 3}));
  auto y = g.tensor(TensorAttr().set_name("y").set_dim({1, 3}));  // broadcast over rows
  auto half = g.tensor(TensorAttr().set_dim({1, 1}).set_stride({1, 1}).set_value(Scalar::of_float(0.5f)));
  auto s = g.add(x, y, NodeAttrs().set_name("sum"));
  auto r = g.relu(s, NodeAttrs().set_name("act"));
  auto o = g.mul(r, half, NodeAttrs().set_name("scale"));
  o->set_output(true).set_name("o");
  ASSERT_TRUE(build_reference(g).is_good());
  std::string name;
  ASSERT_TRUE(g.get_plan_name_at_index(0, name).is_good());
  EXPECT_EQ(name, "reference:reference");
  // Two virtual intermediates, 64-byte aligned, plus alignment slack.
  EXPECT_GE(g.get_workspace_size(), 128);
  ASSERT_EQ(g.variant_uids().size(), 3u);

  std::vector<float> xv{1, -2, 3, -4, 5, -6}, yv{0.5f, 1, -1}, ov(6, -99.f);
  auto ws = workspace_for(g);
  ASSERT_TRUE(g.execute({{x, xv.data()}, {y, yv.data()}, {o, ov.data()}}, ws.data()).is_good());
  std::vector<float> want{0.75f, 0.f, 1.f, 0.f, 3.f, 0.f};
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(ov[i], want[i]) << i;

  // The hot path with the slots in variant_uids() order gives the same result.
  std::fill(ov.begin(), ov.end(), -99.f);
  std::vector<void*> slots;
  for (int64_t uid : g.variant_uids())
    slots.push_back(uid == x->get_uid() ? (void*)xv.data() : uid == y->get_uid() ? (void*)yv.data() : (void*)ov.data());
  ASSERT_TRUE(g.execute(slots.data(), ws.data()).is_good());
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(ov[i], want[i]) << i;

  // An unaligned workspace works too (the plan aligns it).
  std::vector<std::byte> ws2(ws.size() + 8);
  ASSERT_TRUE(g.execute(slots.data(), ws2.data() + 3).is_good());
  for (size_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(ov[i], want[i]) << i;
}

TEST(ReferenceEngine, HalfOutputAndHostScalarSlot) {
  if (!ref::kernel_for(OpKind::POINTWISE)) GTEST_SKIP() << "no POINTWISE reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({4}));
  // A pass-by-value tensor without a value: a slot pointing at a host scalar.
  auto k = g.tensor(TensorAttr().set_name("k").set_dim({1}).set_data_type(DataType::FLOAT).set_is_pass_by_value(true));
  auto o = g.mul(x, k, NodeAttrs().set_name("scale"));
  o->set_output(true).set_name("o");
  ASSERT_TRUE(build_reference(g).is_good());
  ASSERT_EQ(g.variant_uids().size(), 3u);
  std::vector<uint16_t> xv(4), ov(4);
  for (int i = 0; i < 4; ++i) xv[size_t(i)] = double_to_half(i + 0.5);
  float kv = 2.0f;
  auto ws = workspace_for(g);
  ASSERT_TRUE(g.execute({{x->get_uid(), xv.data()}, {k->get_uid(), &kv}, {o->get_uid(), ov.data()}}, ws.data()).is_good());
  for (int i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(half_to_double(ov[size_t(i)]), 2.0 * (i + 0.5));
}

TEST(ReferenceEngine, UnusedVirtualOutputsAreSkipped) {
  if (!ref::kernel_for(OpKind::RMSNORM)) GTEST_SKIP() << "no RMSNORM reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, 4}));
  auto w = g.tensor(TensorAttr().set_name("w").set_dim({1, 4}));
  auto eps = g.tensor(Scalar::of_float(0.0f));
  auto [y, inv] = g.rmsnorm(x, w, eps, NodeAttrs().set_name("norm").set("forward_phase", "INFERENCE"));
  y->set_output(true).set_name("y");
  Status s = build_reference(g);
  if (s.is_bad()) GTEST_SKIP() << s.message();
  EXPECT_EQ(g.get_workspace_size(), 0);  // inv_variance is virtual and nobody reads it
  std::vector<float> xv{1, 1, 1, 1, 3, -3, 3, -3}, wv{1, 2, 3, 4}, yv(8);
  ASSERT_TRUE(g.execute({{x, xv.data()}, {w, wv.data()}, {y, yv.data()}}, nullptr).is_good());
  std::vector<float> want{1, 2, 3, 4, 1, -2, 3, -4};
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(yv[i], want[i], 1e-6) << i;
}

TEST(ReferenceEngine, Matmul) {
  if (!ref::kernel_for(OpKind::MATMUL)) GTEST_SKIP() << "no MATMUL reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({1, 2, 3}));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({1, 3, 2}));
  auto c = g.matmul(a, b, NodeAttrs().set_name("mm"));
  c->set_output(true).set_name("c");
  ASSERT_TRUE(build_reference(g).is_good());
  std::vector<float> av{1, 2, 3, 4, 5, 6}, bv{7, 8, 9, 10, 11, 12}, cv(4);
  auto ws = workspace_for(g);
  ASSERT_TRUE(g.execute({{a, av.data()}, {b, bv.data()}, {c, cv.data()}}, ws.data()).is_good());
  EXPECT_FLOAT_EQ(cv[0], 58);
  EXPECT_FLOAT_EQ(cv[1], 64);
  EXPECT_FLOAT_EQ(cv[2], 139);
  EXPECT_FLOAT_EQ(cv[3], 154);
}

TEST(ReferenceEngine, DeclinesNameTheNode) {
  // The pointwise kernel's check() rejects ranks above its limit: the decline names the node.
  if (!ref::kernel_for(OpKind::POINTWISE)) GTEST_SKIP() << "no POINTWISE reference kernel yet";
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  std::vector<int64_t> dims(40, 1);
  auto x = g.tensor(TensorAttr().set_name("x").set_dim(dims));
  auto o = g.neg(x, NodeAttrs().set_name("deep"));
  o->set_output(true);
  if (g.validate().is_bad()) GTEST_SKIP() << "rank-40 tensors do not validate";
  ASSERT_TRUE(g.create_execution_plans({HeurMode::FALLBACK}).is_good());
  if (g.get_execution_plan_count() > 0) GTEST_SKIP() << "the pointwise kernel accepts rank 40";
  Status s = g.check_support();
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(s.message().find("reference: pointwise \"deep\""), std::string::npos) << s.message();
}

// THD ragged SDPA through the engine: the plan passes each port's ragged-offset data to the kernel
// (after the input ports). Packed Q/K/V/O with per-tensor ragged offsets (elements) must give the
// same attention as the padded BHSD layout with the same sequence lengths, bit for bit (both run
// in double and round once to the I/O type).
TEST(ReferenceEngine, RaggedSdpaMatchesPadded) {
  if (!ref::kernel_for(OpKind::SDPA)) GTEST_SKIP() << "no SDPA reference kernel yet";
  const int64_t B = 3, Hq = 2, Hk = 1, S = 5, D = 16, Dv = 8;
  const std::vector<int32_t> lq{3, 5, 1}, lkv{4, 2, 5};
  for (DataType dt : {DataType::HALF, DataType::BFLOAT16}) {
    SCOPED_TRACE(to_string(dt));
    // Random logical [B,H,S,Dd] values (only valid rows are used).
    auto values = [&](int64_t H, int64_t Dd, uint64_t seed) {
      std::vector<double> r(size_t(B * H * S * Dd));
      uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
      for (auto& x : r) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x = double(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
      }
      return r;
    };
    const std::vector<double> q = values(Hq, D, 1), k = values(Hk, D, 2), v = values(Hk, Dv, 3);
    const size_t esz = 2;  // HALF and BFLOAT16

    // Builds, plans and runs one graph; `ragged` packs Q/K/V/O as [T,H,D] with ragged offsets.
    // Returns O as logical [B,Hq,S,Dv] values (0 for rows beyond seq_len_q).
    auto run = [&](bool ragged, std::vector<double>& o_out, std::vector<double>& stats_out) {
      Graph g;
      g.set_io_data_type(dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
      auto strides = [&](int64_t H, int64_t Dd) {
        return ragged ? std::vector<int64_t>{S * H * Dd, Dd, H * Dd, 1} : std::vector<int64_t>{H * S * Dd, S * Dd, Dd, 1};
      };
      auto mk = [&](const char* name, int64_t H, int64_t Dd) {
        return g.tensor(TensorAttr().set_name(name).set_dim({B, H, S, Dd}).set_stride(strides(H, Dd)).set_data_type(dt));
      };
      auto Q = mk("Q", Hq, D), K = mk("K", Hk, D), V = mk("V", Hk, Dv);
      auto i32 = [&](const char* name, int64_t n) {
        return g.tensor(TensorAttr().set_name(name).set_dim({n, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_data_type(DataType::INT32));
      };
      auto SLQ = i32("seq_len_q", B), SLKV = i32("seq_len_kv", B);
      // Ragged offsets in elements: cumulative token counts times the token's H*D.
      auto offsets = [&](const std::vector<int32_t>& lens, int64_t H, int64_t Dd) {
        std::vector<int32_t> r{0};
        for (int32_t l : lens) r.push_back(r.back() + int32_t(l * H * Dd));
        return r;
      };
      std::vector<int32_t> roq = offsets(lq, Hq, D), rok = offsets(lkv, Hk, D), rov = offsets(lkv, Hk, Dv),
                           roo = offsets(lq, Hq, Dv);
      TensorPtr RQ, RK, RV, RO;
      if (ragged) {
        RQ = i32("ro_q", B + 1), RK = i32("ro_k", B + 1), RV = i32("ro_v", B + 1), RO = i32("ro_o", B + 1);
        Q->set_ragged_offset(RQ), K->set_ragged_offset(RK), V->set_ragged_offset(RV);
      }
      NodeAttrs a;
      a.set_name("attn").set("generate_stats", true).set("attn_scale_value", 0.3).set("use_padding_mask", true);
      a.set("right_bound", int64_t(0)).set("diagonal_alignment", "BOTTOM_RIGHT");
      a.input("seq_len_q", SLQ).input("seq_len_kv", SLKV);
      auto [O, Stats, Mx, Se, Dump] = g.sdpa(Q, K, V, a);
      O->set_output(true).set_name("O").set_dim({B, Hq, S, Dv}).set_stride(strides(Hq, Dv));
      if (ragged) O->set_ragged_offset(RO);
      Stats->set_output(true).set_name("Stats");
      Status st = build_reference(g);
      ASSERT_TRUE(st.is_good()) << st.to_string();

      // Device-side buffers: packed (valid tokens only) or padded.
      auto fill = [&](const std::vector<double>& x, int64_t H, int64_t Dd, const std::vector<int32_t>& lens,
                      const std::vector<int32_t>& ro) {
        std::vector<std::byte> buf(size_t(B * H * S * Dd) * esz);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < lens[size_t(b)]; ++s)
              for (int64_t d = 0; d < Dd; ++d) {
                int64_t off = ragged ? ro[size_t(b)] + s * H * Dd + h * Dd + d : ((b * H + h) * S + s) * Dd + d;
                store_element(dt, buf.data(), off, x[size_t(((b * H + h) * S + s) * Dd + d)]);
              }
        return buf;
      };
      auto qb = fill(q, Hq, D, lq, roq), kb = fill(k, Hk, D, lkv, rok), vb = fill(v, Hk, Dv, lkv, rov);
      // Packed O holds exactly the valid tokens; poison it to see every element is written.
      const size_t o_elems = ragged ? size_t(roo.back()) : size_t(B * Hq * S * Dv);
      std::vector<std::byte> ob(o_elems * esz);
      for (size_t i = 0; i < o_elems; ++i) store_element(dt, ob.data(), int64_t(i), 99.0);
      std::vector<float> sb(size_t(B * Hq * S), -7.f);
      std::vector<int32_t> slq = lq, slkv = lkv;
      std::unordered_map<TensorPtr, void*> pack{{Q, qb.data()},    {K, kb.data()},     {V, vb.data()},
                                                {O, ob.data()},    {Stats, sb.data()}, {SLQ, slq.data()},
                                                {SLKV, slkv.data()}};
      if (ragged) pack.insert({{RQ, roq.data()}, {RK, rok.data()}, {RV, rov.data()}, {RO, roo.data()}});
      auto ws = workspace_for(g);
      st = g.execute(pack, ws.data());
      ASSERT_TRUE(st.is_good()) << st.to_string();

      o_out.assign(size_t(B * Hq * S * Dv), 0.0);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < Hq; ++h)
          for (int64_t s = 0; s < lq[size_t(b)]; ++s)
            for (int64_t d = 0; d < Dv; ++d) {
              int64_t off = ragged ? roo[size_t(b)] + s * Hq * Dv + h * Dv + d : ((b * Hq + h) * S + s) * Dv + d;
              o_out[size_t(((b * Hq + h) * S + s) * Dv + d)] = load_element(dt, ob.data(), off);
            }
      stats_out.assign(sb.begin(), sb.end());
    };

    std::vector<double> o_rag, s_rag, o_pad, s_pad;
    run(true, o_rag, s_rag);
    if (HasFatalFailure()) return;
    run(false, o_pad, s_pad);
    if (HasFatalFailure()) return;
    double max_abs = 0;
    for (size_t i = 0; i < o_pad.size(); ++i) {
      EXPECT_EQ(o_rag[i], o_pad[i]) << "O element " << i;
      EXPECT_NE(o_rag[i], 99.0) << "O element " << i << " not written";
      max_abs = std::max(max_abs, std::fabs(o_pad[i]));
    }
    EXPECT_GT(max_abs, 0.05);  // not trivially zero
    for (size_t i = 0; i < s_pad.size(); ++i) EXPECT_EQ(s_rag[i], s_pad[i]) << "Stats element " << i;
  }
}

// Small graphs run single-threaded: parallel regions need ku::kParallelMinWork element operations.
TEST(ReferenceEngine, ParallelThresholdSkipsTinyWork) {
  EXPECT_EQ(ref::ku::parallel_min_work(), ref::ku::kParallelMinWork);
  EXPECT_FALSE(ref::ku::parallel_worth(6));
  EXPECT_FALSE(ref::ku::parallel_worth(ref::ku::work_of({2, 3})));
  EXPECT_TRUE(ref::ku::parallel_worth(ref::ku::work_of({256, 256})));
  EXPECT_EQ(ref::ku::work_of({0, 5}), 0);
  EXPECT_EQ(ref::ku::work_of({int64_t(1) << 40, int64_t(1) << 40}), INT64_MAX);  // saturates
}

// Results are bitwise the same whether the regions run serially (default threshold, 1 thread) or
// threaded (threshold 0, 2 or 3 threads): matmul, pointwise, reduction and rmsnorm in one graph.
TEST(ReferenceEngine, ResultsIndependentOfThreadsAndThreshold) {
  for (OpKind k : {OpKind::MATMUL, OpKind::POINTWISE, OpKind::REDUCTION, OpKind::RMSNORM})
    if (!ref::kernel_for(k)) GTEST_SKIP() << "a reference kernel is missing";
  const int64_t M = 37, K = 29, N = 41;
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({2, M, K}));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({2, K, N}));
  auto w = g.tensor(TensorAttr().set_name("w").set_dim({1, 1, N}));
  auto c = g.matmul(a, b, NodeAttrs().set_name("mm"));
  auto r = g.relu(g.add(c, w, NodeAttrs().set_name("add")), NodeAttrs().set_name("act"));
  TensorPtr y = g.rmsnorm(r, w, g.tensor(Scalar::of_float(1e-5f)),
                         NodeAttrs().set_name("norm").set("forward_phase", "INFERENCE"))[0];
  y->set_output(true).set_name("y");
  auto s = g.reduction(y, NodeAttrs().set_name("sum").set("mode", "ADD"));
  s->set_output(true).set_name("s").set_dim({2, M, 1});
  Status st = build_reference(g);
  ASSERT_TRUE(st.is_good()) << st.to_string();
  auto fill = [](size_t n, uint32_t seed) {
    std::vector<float> v(n);
    for (auto& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = float(int32_t(seed >> 8) % 2001 - 1000) / 997.0f;
    }
    return v;
  };
  std::vector<float> av = fill(size_t(2 * M * K), 1), bv = fill(size_t(2 * K * N), 2), wv = fill(size_t(N), 3);
  auto ws = workspace_for(g);
  auto run = [&](int threads, int64_t threshold, std::vector<float>& yv, std::vector<float>& sv) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    ref::ku::set_parallel_min_work(threshold);
    yv.assign(size_t(2 * M * N), -1.f), sv.assign(size_t(2 * M), -1.f);
    Status e = g.execute({{a, av.data()}, {b, bv.data()}, {w, wv.data()}, {y, yv.data()}, {s, sv.data()}}, ws.data());
    ref::ku::set_parallel_min_work(ref::ku::kParallelMinWork);
    omp_set_num_threads(before);
    ASSERT_TRUE(e.is_good()) << e.to_string();
  };
  std::vector<float> y1, s1, y2, s2, y3, s3;
  run(1, ref::ku::kParallelMinWork, y1, s1);
  run(2, 0, y2, s2);
  run(3, 0, y3, s3);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(s1.data(), s2.data(), s1.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(s1.data(), s3.data(), s1.size() * sizeof(float)));
}
