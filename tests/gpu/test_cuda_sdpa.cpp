// SPDX-License-Identifier: Apache-2.0
// The cuda engine's SDPA forward plan against a double-precision host computation of the reference
// engine's semantics (src/engines/reference/sdpa.cpp): head dims, causal top-left/bottom-right, GQA,
// odd lengths, sliding windows, padding masks, THD ragged layouts with a zero-length sequence,
// attention sinks, BSHD strides; O and Stats (LSE); the v2 kernel's persistent schedule
// (OPENDNN_SDPA_FWD_PERSISTENT=1 and 2). Needs an NVIDIA GPU (sm_90+); skips elsewhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/dtype_convert.h"
#include "opendnn/opendnn.h"
#include "support/device.h"

using namespace opendnn;

namespace {

using test::DevBuf;
bool have_gpu() { return test::have_sm90_gpu(); }

struct Case {
  std::string name;
  int64_t b = 1, hq = 2, hk = 2, sq = 128, skv = 128, d = 64, dv = 64;
  bool fp16 = false;
  bool causal = false, bottom_right = false;
  std::optional<int64_t> left, right;
  bool bshd = false;
  std::vector<int32_t> seq_q, seq_kv;  // padding mask when non-empty
  bool thd = false;                     // token-packed Q/O and K/V with ragged offsets (needs seq_q/seq_kv)
  bool sink = false;
  std::string plan;        // when set, the name the selected cuda plan must have
  int64_t sm_count = -1;   // the graph's sm_count when > 0 (caps the persistent kernel's CTAs)
  bool run_twice = false;  // execute again on the same (dirtied) workspace, output poisoned anew
};

using test::ScopedEnv;

// Storage of a logical [B,H,S,D] tensor: strides and per-batch element offsets (THD).
struct Layout {
  std::vector<int64_t> stride;
  std::vector<int32_t> ragged;  // [B+1] when packed
  int64_t elements = 0;
  int64_t at(int64_t b, int64_t h, int64_t s, int64_t x) const {
    int64_t base = ragged.empty() ? b * stride[0] : ragged[size_t(b)];
    return base + h * stride[1] + s * stride[2] + x;
  }
};

Layout layout_of(const Case& c, int64_t B, int64_t H, int64_t S, int64_t D, const std::vector<int32_t>& lens) {
  Layout l;
  if (c.thd) {
    l.stride = {S * H * D, D, H * D, 1};
    l.ragged.assign(size_t(B + 1), 0);
    for (int64_t b = 0; b < B; ++b) l.ragged[size_t(b + 1)] = l.ragged[size_t(b)] + int32_t(lens[size_t(b)] * H * D);
    // The last sequence's tail tile may read (and the kernel never writes) up to S rows past it.
    l.elements = l.ragged[size_t(B)] + S * H * D;
  } else if (c.bshd) {
    l.stride = {S * H * D, D, H * D, 1};
    l.elements = B * S * H * D;
  } else {
    l.stride = {H * S * D, S * D, D, 1};
    l.elements = B * H * S * D;
  }
  return l;
}

uint16_t to_bits(double x, bool fp16) { return fp16 ? double_to_half(x) : double_to_bf16(x); }
double from_bits(uint16_t x, bool fp16) { return fp16 ? half_to_double(x) : bf16_to_double(x); }

// A stored tensor as dense [B,H,S,D] doubles (rows past a sequence's length stay 0): the fp64
// reference's inner loops then run over contiguous rows (converting per use made V2Kernel take 48 s).
std::vector<double> dense(const std::vector<uint16_t>& t, const Layout& l, int64_t B, int64_t H, int64_t S, int64_t D,
                          const std::vector<int32_t>& lens, bool fp16) {
  std::vector<double> out(size_t(B * H * S * D), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < std::min<int64_t>(S, lens[size_t(b)]); ++i)
        for (int64_t x = 0; x < D; ++x) out[size_t(((b * H + h) * S + i) * D + x)] = from_bits(t[size_t(l.at(b, h, i, x))], fp16);
  return out;
}

void run_case(const Case& c) {
  SCOPED_TRACE(c.name);
  // The engine reads OPENDNN_SDPA_FWD_V2 when it plans: cases that name a v2 plan get v2 (the default
  // where it applies), every other case pins the first kernel so that it stays tested.
  setenv("OPENDNN_SDPA_FWD_V2", c.plan.find("_v2_") != std::string::npos ? "1" : "0", 1);
  // ... and the persistent schedule (the default where it applies) only for cases naming it.
  const bool q2 = c.plan.find("_persistent_q2") != std::string::npos;
  setenv("OPENDNN_SDPA_FWD_PERSISTENT", q2 ? "2" : c.plan.find("_persistent") != std::string::npos ? "1" : "0", 1);
  const double scale = 1.0 / std::sqrt(double(c.d));
  const int64_t B = c.b, Hq = c.hq, Hk = c.hk;
  const bool padding = !c.seq_q.empty();
  std::vector<int32_t> lq(size_t(B), int32_t(c.sq)), lkv(size_t(B), int32_t(c.skv));
  if (padding) lq = c.seq_q, lkv = c.seq_kv;
  Layout LQ = layout_of(c, B, Hq, c.sq, c.d, lq), LK = layout_of(c, B, Hk, c.skv, c.d, lkv);
  Layout LV = layout_of(c, B, Hk, c.skv, c.dv, lkv), LO = layout_of(c, B, Hq, c.sq, c.dv, lq);

  std::mt19937 rng(uint32_t(c.d * 131 + c.sq * 7 + c.skv));
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  auto fill = [&](const Layout& l) {
    std::vector<uint16_t> v(size_t(l.elements));
    for (auto& e : v) e = to_bits(u(rng), c.fp16);
    return v;
  };
  auto q = fill(LQ), k = fill(LK), v = fill(LV);
  std::vector<float> sink(static_cast<size_t>(Hq));
  for (auto& s : sink) s = float(u(rng));

  // fp64 reference of the documented semantics.
  const std::vector<double> qd = dense(q, LQ, B, Hq, c.sq, c.d, lq, c.fp16), kd = dense(k, LK, B, Hk, c.skv, c.d, lkv, c.fp16),
                            vd = dense(v, LV, B, Hk, c.skv, c.dv, lkv, c.fp16);
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> ro(size_t(B * Hq * c.sq * c.dv), 0.0), rl(size_t(B * Hq * c.sq), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t sq = lq[size_t(b)], skv = lkv[size_t(b)], hk = h / (Hq / Hk);
      for (int64_t i = 0; i < sq; ++i) {
        const int64_t ia = c.bottom_right ? i + skv - sq : i;
        std::vector<double> s(size_t(skv), ninf);
        double m = c.sink ? double(sink[size_t(h)]) : ninf;
        for (int64_t j = 0; j < skv; ++j) {
          if (c.right && j > ia + *c.right) continue;
          if (c.left && j <= ia - *c.left) continue;
          const double* qr = &qd[size_t(((b * Hq + h) * c.sq + i) * c.d)];
          const double* kr = &kd[size_t(((b * Hk + hk) * c.skv + j) * c.d)];
          double acc = 0;
          for (int64_t x = 0; x < c.d; ++x) acc += qr[x] * kr[x];
          s[size_t(j)] = scale * acc;
          m = std::max(m, s[size_t(j)]);
        }
        double sum = (c.sink && m > ninf) ? std::exp(double(sink[size_t(h)]) - m) : 0.0;
        for (int64_t j = 0; j < skv; ++j)
          if (s[size_t(j)] > ninf) sum += std::exp(s[size_t(j)] - m);
        for (int64_t j = 0; j < skv; ++j) {
          if (s[size_t(j)] == ninf) continue;
          const double pj = std::exp(s[size_t(j)] - m) / sum;
          const double* vr = &vd[size_t(((b * Hk + hk) * c.skv + j) * c.dv)];
          double* orow = &ro[size_t(((b * Hq + h) * c.sq + i) * c.dv)];
          for (int64_t x = 0; x < c.dv; ++x) orow[x] += pj * vr[x];
        }
        rl[size_t((b * Hq + h) * c.sq + i)] = m > ninf ? m + std::log(sum) : ninf;
      }
    }

  // The graph.
  const DataType dt = c.fp16 ? DataType::HALF : DataType::BFLOAT16;
  Graph g;
  g.set_io_data_type(dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  if (c.sm_count > 0) g.set_sm_count(c.sm_count);
  auto tensor = [&](const char* name, std::vector<int64_t> dims, std::vector<int64_t> stride, DataType t) {
    TensorAttr a;
    a.set_name(name).set_dim(std::move(dims)).set_data_type(t);
    if (!stride.empty()) a.set_stride(std::move(stride));
    return g.tensor(a);
  };
  auto Q = tensor("q", {B, Hq, c.sq, c.d}, LQ.stride, dt);
  auto K = tensor("k", {B, Hk, c.skv, c.d}, LK.stride, dt);
  auto V = tensor("v", {B, Hk, c.skv, c.dv}, LV.stride, dt);
  NodeAttrs a;
  a.set_name("attn").set("attn_scale_value", scale).set("generate_stats", true);
  if (c.causal) a.set("right_bound", int64_t(0));
  if (c.right) a.set("right_bound", *c.right);
  if (c.left) a.set("left_bound", *c.left);
  if (c.bottom_right) a.set("diagonal_alignment", "BOTTOM_RIGHT");
  TensorPtr SLQ, SLKV, ROQ, ROK, ROV, ROO, SINK;
  if (padding) {
    a.set("use_padding_mask", true);
    SLQ = tensor("slq", {B, 1, 1, 1}, {}, DataType::INT32);
    SLKV = tensor("slkv", {B, 1, 1, 1}, {}, DataType::INT32);
    a.input("seq_len_q", SLQ).input("seq_len_kv", SLKV);
  }
  if (c.thd) {
    ROQ = tensor("roq", {B + 1, 1, 1, 1}, {}, DataType::INT32);
    ROK = tensor("rok", {B + 1, 1, 1, 1}, {}, DataType::INT32);
    ROV = tensor("rov", {B + 1, 1, 1, 1}, {}, DataType::INT32);
    ROO = tensor("roo", {B + 1, 1, 1, 1}, {}, DataType::INT32);
    Q->set_ragged_offset(ROQ);
    K->set_ragged_offset(ROK);
    V->set_ragged_offset(ROV);
  }
  if (c.sink) {
    SINK = tensor("sink", {1, Hq, 1, 1}, {}, DataType::FLOAT);
    a.input("sink_token", SINK);
  }
  auto outs = g.sdpa(Q, K, V, a);
  TensorPtr O = outs[0], S = outs[1];
  O->set_output(true);
  S->set_output(true);
  if (c.thd) O->set_ragged_offset(ROO);

  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  ASSERT_TRUE(g.create_execution_plans(test::kOurEngines).is_good());
  ASSERT_TRUE(g.deselect_engines({"cudnn", "reference"}).is_good());
  Status sup = g.check_support();
  ASSERT_TRUE(sup.is_good()) << sup.to_string();
  ASSERT_TRUE(g.build_plans().is_good());
  std::string engine;
  EXPECT_TRUE(g.get_engine_name_at_index(g.selected_plan(), engine).is_good());
  ASSERT_EQ(engine, "cuda");
  if (!c.plan.empty()) {
    std::string plan;
    EXPECT_TRUE(g.get_plan_name_at_index(g.selected_plan(), plan).is_good());
    ASSERT_EQ(plan, c.plan);
  }

  DevBuf dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dout(size_t(LO.elements) * 2),
      dstats(size_t(B * Hq * c.sq) * 4), dslq(size_t(B) * 4), dslkv(size_t(B) * 4), droq(size_t(B + 1) * 4),
      drok(size_t(B + 1) * 4), drov(size_t(B + 1) * 4), droo(size_t(B + 1) * 4), dsink(size_t(Hq) * 4);
  dq.put(q);
  dk.put(k);
  dv.put(v);
  // Poison: NaN bit patterns, so an unwritten element fails the comparison.
  ASSERT_EQ(cudaMemset(dout.p, 0xff, size_t(LO.elements) * 2), cudaSuccess);
  ASSERT_EQ(cudaMemset(dstats.p, 0xff, size_t(B * Hq * c.sq) * 4), cudaSuccess);
  std::unordered_map<TensorPtr, void*> pack = {{Q, dq.p}, {K, dk.p}, {V, dv.p}, {O, dout.p}, {S, dstats.p}};
  if (padding) {
    dslq.put(lq);
    dslkv.put(lkv);
    pack[SLQ] = dslq.p;
    pack[SLKV] = dslkv.p;
  }
  if (c.thd) {
    droq.put(LQ.ragged);
    drok.put(LK.ragged);
    drov.put(LV.ragged);
    droo.put(LO.ragged);
    pack[ROQ] = droq.p, pack[ROK] = drok.p, pack[ROV] = drov.p, pack[ROO] = droo.p;
  }
  if (c.sink) {
    dsink.put(sink);
    pack[SINK] = dsink.p;
  }
  // Workspace (the persistent kernel's tile counter): filled with 0x7f bytes, so a launch that did not
  // zero its counter skips every tile past the first wave and leaves NaN behind.
  int64_t ws_bytes = 0;
  ASSERT_TRUE(g.get_workspace_size(ws_bytes).is_good());
  DevBuf ws{size_t(ws_bytes)};
  ASSERT_EQ(cudaMemset(ws.p, 0x7f, size_t(ws_bytes)), cudaSuccess);
  Status ex = g.execute(pack, ws_bytes > 0 ? ws.p : nullptr);
  ASSERT_TRUE(ex.is_good()) << ex.to_string();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (c.run_twice) {  // the counter now holds the last launch's count
    ASSERT_EQ(cudaMemset(dout.p, 0xff, size_t(LO.elements) * 2), cudaSuccess);
    ASSERT_EQ(cudaMemset(dstats.p, 0xff, size_t(B * Hq * c.sq) * 4), cudaSuccess);
    ex = g.execute(pack, ws_bytes > 0 ? ws.p : nullptr);
    ASSERT_TRUE(ex.is_good()) << ex.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  auto o = dout.get<uint16_t>(size_t(LO.elements));
  auto st = dstats.get<float>(size_t(B * Hq * c.sq));

  const double atol = 2e-2, rtol = 2e-2;
  int bad = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < c.sq; ++i) {
        const bool valid = i < lq[size_t(b)];
        if (!valid && c.thd) continue;  // those rows belong to the next sequence
        const double want_l = rl[size_t((b * Hq + h) * c.sq + i)];
        const double got_l = st[size_t((b * Hq + h) * c.sq + i)];
        const bool l_ok = std::isinf(want_l) ? (std::isinf(got_l) && got_l < 0)
                                             : std::fabs(got_l - want_l) <= atol + rtol * std::fabs(want_l);
        if (!l_ok && bad++ < 8) ADD_FAILURE() << "Stats b" << b << " h" << h << " i" << i << ": " << got_l << " vs " << want_l;
        for (int64_t x = 0; x < c.dv; ++x) {
          const double want = ro[size_t(((b * Hq + h) * c.sq + i) * c.dv + x)];
          const double got = from_bits(o[size_t(LO.at(b, h, i, x))], c.fp16);
          if (!(std::fabs(got - want) <= atol + rtol * std::fabs(want)) && bad++ < 8)
            ADD_FAILURE() << "O b" << b << " h" << h << " i" << i << " d" << x << ": " << got << " vs " << want;
        }
      }
  EXPECT_EQ(bad, 0);
}

#define GPU_OR_SKIP() \
  if (!have_gpu()) GTEST_SKIP() << "no sm_90 GPU"

Case shape(std::string name, int64_t b, int64_t hq, int64_t hk, int64_t sq, int64_t skv, int64_t d, int64_t dv) {
  Case c;
  c.name = std::move(name);
  c.b = b, c.hq = hq, c.hk = hk, c.sq = sq, c.skv = skv, c.d = d, c.dv = dv;
  return c;
}
Case causal(Case c, bool bottom_right = false) {
  c.causal = true;
  c.right = 0;  // what the fp64 reference masks by (the graph gets right_bound = 0 either way)
  c.bottom_right = bottom_right;
  return c;
}

TEST(CudaSdpaFwd, HeadDims) {
  GPU_OR_SKIP();
  run_case(shape("d64", 1, 2, 2, 128, 128, 64, 64));
  run_case(shape("d128", 1, 2, 2, 128, 128, 128, 128));
  run_case(shape("d256", 1, 2, 2, 128, 128, 256, 256));
  run_case(shape("d192/128", 1, 2, 2, 128, 128, 192, 128));
  Case h = shape("d128 fp16", 1, 2, 2, 128, 128, 128, 128);
  h.fp16 = true;
  run_case(h);
}

TEST(CudaSdpaFwd, CausalGqaOddLengths) {
  GPU_OR_SKIP();
  run_case(shape("odd", 2, 4, 1, 77, 131, 64, 64));
  run_case(causal(shape("causal TL", 2, 4, 2, 77, 131, 128, 128)));
  run_case(causal(shape("causal BR", 2, 4, 2, 77, 131, 128, 128), true));
  run_case(causal(shape("causal TL sq>skv", 1, 2, 1, 200, 70, 64, 64)));
  run_case(causal(shape("causal BR sq>skv", 1, 2, 1, 200, 70, 64, 64), true));
  Case bshd = causal(shape("bshd causal", 2, 4, 2, 300, 300, 64, 64));
  bshd.bshd = true;
  run_case(bshd);
  run_case(causal(shape("long d256 causal", 1, 1, 1, 513, 513, 256, 256)));
  run_case(causal(shape("d192/128 causal BR", 1, 2, 1, 100, 333, 192, 128), true));
}

TEST(CudaSdpaFwd, SlidingWindow) {
  GPU_OR_SKIP();
  Case w = shape("window 32/0", 1, 2, 2, 200, 200, 64, 64);
  w.left = 32, w.right = 0;
  run_case(w);
  Case br = shape("window 100/17 BR", 1, 2, 1, 150, 260, 128, 128);
  br.bottom_right = true, br.left = 100, br.right = 17;
  run_case(br);
}

TEST(CudaSdpaFwd, PaddingThdSink) {
  GPU_OR_SKIP();
  Case pad = causal(shape("padding", 3, 2, 2, 150, 140, 64, 64));
  pad.seq_q = {150, 37, 0}, pad.seq_kv = {140, 90, 12};
  run_case(pad);
  Case thd = shape("thd", 3, 4, 2, 160, 200, 128, 128);
  thd.seq_q = {100, 0, 160}, thd.seq_kv = {200, 33, 7}, thd.thd = true;
  run_case(thd);
  Case thd_br = causal(shape("thd causal BR", 3, 2, 2, 130, 130, 64, 64), true);
  thd_br.seq_q = {5, 130, 64}, thd_br.seq_kv = {129, 0, 64}, thd_br.thd = true;
  run_case(thd_br);
  Case sink = causal(shape("sink", 1, 2, 2, 100, 90, 64, 64));
  sink.sink = true;
  run_case(sink);
}

// The TMA/producer-warp kernel (sdpa_fwd_v2.cuh), the default where it applies (OPENDNN_SDPA_FWD_V2=0
// turns it off); these cases require it to be the plan that runs. They cover what
// fwd_v2_supports accepts: head dims 64/128/256, fp16/bf16, BHSD/BSHD, GQA/MQA, odd
// lengths (partial tiles of both Q and K/V), no mask and causal in both alignments, runs of
// key tiles that wrap the K/V ring several times.
TEST(CudaSdpaFwd, V2Kernel) {
  GPU_OR_SKIP();
  auto v2 = [](Case c) {
    c.plan = "cuda:sdpa_fwd_v2_d" + std::to_string(c.d) + (c.dv != c.d ? "_" + std::to_string(c.dv) : "");
    return c;
  };
  // d128
  run_case(v2(shape("v2 d128", 1, 2, 2, 128, 128, 128, 128)));
  run_case(v2(shape("v2 d128 multi-tile GQA", 2, 4, 2, 256, 512, 128, 128)));
  run_case(v2(shape("v2 d128 ring wraps, MQA", 1, 4, 1, 128, 1152, 128, 128)));
  Case h = v2(shape("v2 d128 fp16", 1, 2, 2, 384, 256, 128, 128));
  h.fp16 = true;
  run_case(h);
  Case bshd = v2(shape("v2 bshd", 2, 2, 1, 256, 384, 128, 128));
  bshd.bshd = true;
  run_case(bshd);
  run_case(v2(causal(shape("v2 causal TL", 1, 2, 2, 384, 384, 128, 128))));
  run_case(v2(causal(shape("v2 causal BR skv>sq", 1, 2, 1, 256, 512, 128, 128), true)));
  run_case(v2(causal(shape("v2 causal TL sq>skv", 1, 2, 2, 512, 256, 128, 128))));
  run_case(v2(causal(shape("v2 causal BR sq>skv", 1, 2, 2, 512, 256, 128, 128), true)));
  Case cb = v2(causal(shape("v2 bshd causal", 2, 4, 2, 512, 512, 128, 128)));
  cb.bshd = true;
  run_case(cb);
  run_case(v2(causal(shape("v2 causal long", 1, 1, 1, 1024, 1024, 128, 128))));
  // Odd lengths: partial Q tiles (rows past sq not written) and partial K/V tiles (zero-filled by
  // TMA, masked).
  run_case(v2(shape("v2 odd", 2, 4, 1, 77, 131, 128, 128)));
  run_case(v2(causal(shape("v2 odd causal TL", 2, 4, 2, 77, 131, 128, 128))));
  run_case(v2(causal(shape("v2 odd causal BR", 2, 4, 2, 77, 131, 128, 128), true)));
  run_case(v2(causal(shape("v2 odd causal TL sq>skv", 1, 2, 1, 200, 70, 128, 128))));
  run_case(v2(causal(shape("v2 odd causal BR sq>skv", 1, 2, 1, 200, 70, 128, 128), true)));
  Case ob = v2(causal(shape("v2 odd bshd causal BR fp16", 2, 2, 1, 300, 333, 128, 128), true));
  ob.bshd = true, ob.fp16 = true;
  run_case(ob);
  // d64 (3-stage ring of 128-key tiles).
  run_case(v2(shape("v2 d64", 2, 4, 2, 256, 640, 64, 64)));
  Case d64 = v2(causal(shape("v2 d64 bshd causal odd", 2, 4, 2, 300, 300, 64, 64)));
  d64.bshd = true;
  run_case(d64);
  run_case(v2(causal(shape("v2 d64 causal BR sq>skv", 1, 2, 1, 200, 70, 64, 64), true)));
  // d256 (64-key tiles, 2 stages).
  run_case(v2(shape("v2 d256", 1, 2, 1, 128, 320, 256, 256)));
  run_case(v2(causal(shape("v2 d256 causal odd", 1, 1, 1, 513, 513, 256, 256))));
  run_case(v2(causal(shape("v2 d256 causal BR", 1, 2, 2, 100, 333, 256, 256), true)));
  // d192/128 is not in v2: the first kernel runs it.
  Case d192 = causal(shape("v1 d192/128 causal BR", 1, 2, 1, 100, 333, 192, 128), true);
  d192.plan = "cuda:sdpa_fwd_d192_128";
  run_case(d192);
  // Outside v2's cases the v1 plan still runs.
  Case w = shape("v1 fallback window", 1, 2, 2, 200, 200, 128, 128);
  w.left = 32, w.right = 0, w.plan = "cuda:sdpa_fwd_d128";
  run_case(w);
}

TEST(CudaSdpaFwd, DeclinesOutOfScope) {
  GPU_OR_SKIP();
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto Q = g.tensor(TensorAttr().set_name("q").set_dim({1, 2, 64, 96}));
  auto K = g.tensor(TensorAttr().set_name("k").set_dim({1, 2, 64, 96}));
  auto V = g.tensor(TensorAttr().set_name("v").set_dim({1, 2, 64, 96}));
  auto outs = g.sdpa(Q, K, V, NodeAttrs().set_name("attn"));
  outs[0]->set_output(true);
  ASSERT_TRUE(g.validate().is_good());
  ASSERT_TRUE(g.create_execution_plans(test::kOurEngines).is_good());
  ASSERT_TRUE(g.deselect_engines({"cudnn", "reference"}).is_good());
  EXPECT_TRUE(g.check_support().is_bad()) << "head dim 96 has no cuda kernel and must be declined";
}

// Last in the file, so that a persistent kernel that faults or hangs takes no other test with it.
// The v2 kernel's persistent schedule (OPENDNN_SDPA_FWD_PERSISTENT, the default with two Q buffers; sdpa_fwd_v2.cuh): CTAs take
// (query block, head, batch) tiles from a counter in the workspace, the K/V ring and the Q halves
// running on across tiles; mode 2 alternates two Q buffers (and d128 has a 2-stage ring there). A
// small graph sm_count makes each CTA run many tiles (ids in both slots, ring and Q-buffer phases
// across tiles, tiles with no visible key); every case executes twice on the same workspace (the
// launch must zero the counter). d64/d128 only; d256 keeps the grid schedule.
void persistent_cases(const char* mode) {
  ScopedEnv on("OPENDNN_SDPA_FWD_PERSISTENT", mode);
  const std::string suffix = std::string(mode) == "2" ? "_persistent_q2" : "_persistent";
  auto pv2 = [&](Case c, int64_t sms) {
    c.name += std::string(" (mode ") + mode + ")";
    c.plan = "cuda:sdpa_fwd_v2_d" + std::to_string(c.d) + suffix;
    c.sm_count = sms, c.run_twice = true;
    return c;
  };
  // d128, dense: GQA, MQA with the ring wrapping within and across tiles, fp16, BSHD.
  run_case(pv2(shape("pv2 d128 GQA", 2, 4, 2, 256, 512, 128, 128), 3));
  run_case(pv2(shape("pv2 d128 MQA ring wraps, one CTA", 1, 4, 1, 384, 1152, 128, 128), 1));
  Case h = pv2(shape("pv2 d128 fp16", 1, 2, 2, 384, 256, 128, 128), 2);
  h.fp16 = true;
  run_case(h);
  Case bshd = pv2(shape("pv2 bshd", 2, 2, 1, 256, 384, 128, 128), 5);
  bshd.bshd = true;
  run_case(bshd);
  // Causal, both alignments, with blocks that see no key (BR sq > skv) on one CTA.
  run_case(pv2(causal(shape("pv2 causal TL", 1, 2, 2, 384, 384, 128, 128)), 2));
  run_case(pv2(causal(shape("pv2 causal BR skv>sq", 1, 2, 1, 256, 512, 128, 128), true), 2));
  run_case(pv2(causal(shape("pv2 causal TL sq>skv", 1, 2, 2, 512, 256, 128, 128)), 3));
  run_case(pv2(causal(shape("pv2 causal BR sq>skv, one CTA", 1, 2, 2, 512, 256, 128, 128), true), 1));
  Case cb = pv2(causal(shape("pv2 bshd causal", 2, 4, 2, 512, 512, 128, 128)), 7);
  cb.bshd = true;
  run_case(cb);
  // Odd lengths: partial Q halves, a Q half wholly past sq (sq < 64), partial K/V tiles.
  run_case(pv2(shape("pv2 odd", 2, 4, 1, 77, 131, 128, 128), 3));
  run_case(pv2(shape("pv2 odd sq<64", 2, 3, 1, 50, 131, 128, 128), 2));
  run_case(pv2(causal(shape("pv2 odd causal TL", 2, 4, 2, 77, 131, 128, 128)), 3));
  run_case(pv2(causal(shape("pv2 odd causal BR", 2, 4, 2, 77, 131, 128, 128), true), 3));
  run_case(pv2(causal(shape("pv2 odd causal BR sq>skv", 1, 2, 1, 200, 70, 128, 128), true), 1));
  Case ob = pv2(causal(shape("pv2 odd bshd causal BR fp16", 2, 2, 1, 300, 333, 128, 128), true), 4);
  ob.bshd = true, ob.fp16 = true;
  run_case(ob);
  // d64.
  run_case(pv2(shape("pv2 d64", 2, 4, 2, 256, 640, 64, 64), 3));
  Case d64 = pv2(causal(shape("pv2 d64 bshd causal odd", 2, 4, 2, 300, 300, 64, 64)), 5);
  d64.bshd = true;
  run_case(d64);
  run_case(pv2(causal(shape("pv2 d64 causal BR sq>skv", 1, 2, 1, 200, 70, 64, 64), true), 1));
  // The device's own SM count, more tiles than SMs (the counter hands out the rest).
  run_case(pv2(shape("pv2 d64 160 tiles", 4, 20, 20, 256, 256, 64, 64), -1));
  run_case(pv2(causal(shape("pv2 d128 causal 200 tiles", 1, 40, 8, 640, 640, 128, 128)), -1));
  // Not taken by the persistent schedule: d256 (the grid schedule of v2), per-batch lengths (v1).
  Case d256 = causal(shape("pv2 switch, d256 stays on v2", 1, 2, 2, 100, 333, 256, 256), true);
  d256.plan = "cuda:sdpa_fwd_v2_d256";
  run_case(d256);
  Case pad = causal(shape("pv2 switch, padding stays on v1", 3, 2, 2, 150, 140, 64, 64));
  pad.seq_q = {150, 37, 0}, pad.seq_kv = {140, 90, 12};
  pad.plan = "cuda:sdpa_fwd_d64";
  run_case(pad);
}

TEST(CudaSdpaFwd, V2Persistent) {
  GPU_OR_SKIP();
  persistent_cases("1");
}

TEST(CudaSdpaFwd, V2PersistentTwoQBuffers) {
  GPU_OR_SKIP();
  persistent_cases("2");
}

}  // namespace
