// SPDX-License-Identifier: Apache-2.0
// GDN and GDN_BWD: inference of dims/strides/types and every rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

namespace {

const std::string kFwd = "gdn \"lin\"";
const std::string kBwd = "gdn_bwd \"lin_bwd\"";

// T tokens in N sequences; q/k [T,H,K], v [T,HV,V], g/beta [T,HO].
struct Gdn {
  Graph g;
  int64_t t = 300, h = 4, hv = 8, k = 128, v = 64, n = 3;
  DataType dt = DataType::BFLOAT16;
  TensorPtr q, kk, vv, gg, beta, cu;
  NodeAttrs attrs;
  Gdn() {
    g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    attrs.set_name("lin");
  }
  int64_t ho() const { return h > hv ? h : hv; }
  void make() {
    q = input(g, "q", {t, h, k}, dt);
    kk = input(g, "k", {t, h, k}, dt);
    vv = input(g, "v", {t, hv, v}, dt);
    gg = input(g, "g", {t, ho()}, DataType::FLOAT);
    beta = input(g, "beta", {t, ho()}, DataType::FLOAT);
    cu = input(g, "cu", {n + 1}, DataType::INT32);
  }
  std::array<TensorPtr, 3> fwd() {
    if (!q) make();
    return g.gdn(q, kk, vv, gg, beta, cu, attrs);
  }
};

TEST(GdnInfer, ForwardGvaFinalStateCheckpoints) {
  Gdn f;
  f.make();
  auto init = input(f.g, "h0", {3, 8, 64, 128}, DataType::BFLOAT16);
  f.attrs.input("initial_state", init).set("output_final_state", true).set("checkpoint_every_n_tokens", 64);
  f.attrs.set("safe_gate", true).input("a_log", input(f.g, "alog", {8}, DataType::FLOAT)).input("dt_bias", input(f.g, "dtb", {8}, DataType::FLOAT));
  auto out = f.fwd();
  for (auto& o : out) o->set_output(true);
  ASSERT_TRUE(f.g.validate().is_good()) << f.g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{300, 8, 64}));
  EXPECT_EQ(out[0]->get_stride(), (Dims{8 * 64, 64, 1}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(out[1]->get_dim(), (Dims{3, 8, 64, 128}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::BFLOAT16);  // follows initial_state
  EXPECT_EQ(out[2]->get_dim(), (Dims{300 / 64 + 3, 8, 64, 128}));
  EXPECT_EQ(out[2]->get_data_type(), DataType::BFLOAT16);
}

TEST(GdnInfer, GqaOtherWayFp32AndDefaults) {
  Gdn f;
  f.h = 8, f.hv = 2, f.dt = DataType::FLOAT;
  f.attrs.set("output_final_state", true);
  auto out = f.fwd();
  ASSERT_TRUE(f.g.validate().is_good()) << f.g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{300, 8, 64}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::FLOAT);
  EXPECT_EQ(out[1]->get_dim(), (Dims{3, 8, 64, 128}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::FLOAT);  // no initial_state: FLOAT
  EXPECT_EQ(out[2]->get_dim(), (Dims{0, 0, 0, 0}));     // no checkpoints
}

TEST(GdnInfer, StatePoolWithIndices) {
  Gdn f;
  f.make();
  f.attrs.input("initial_state", input(f.g, "pool", {16, 8, 64, 128}, DataType::FLOAT))
      .input("state_indices", input(f.g, "idx", {3}, DataType::INT32))
      .set("overwrite_initial_state", true)
      .set("output_final_state", true);
  auto out = f.fwd();
  ASSERT_TRUE(f.g.validate().is_good()) << f.g.validate().to_string();
  EXPECT_EQ(out[1]->get_dim(), (Dims{3, 8, 64, 128}));
  EXPECT_EQ(out[1]->get_data_type(), DataType::FLOAT);
}

TEST(GdnReject, ShapesAndHeads) {
  auto run = [](auto mutate, ErrorCode code, const std::string& what) {
    Gdn f;
    f.make();
    mutate(f);
    f.fwd();
    expect_fail(f.g, code, kFwd, what);
  };
  run([](Gdn& f) { f.q->set_dim({300, 4, 128, 1}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "input q must have 3 dims");
  run([](Gdn& f) { f.kk->set_dim({299, 4, 128}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "token counts differ");
  run([](Gdn& f) { f.kk->set_dim({300, 4, 64}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "head dim of k");
  run([](Gdn& f) { f.kk->set_dim({300, 8, 128}); }, ErrorCode::GRAPH_NOT_SUPPORTED, "only HK == H (4) is supported");
  run([](Gdn& f) { f.kk->set_dim({300, 2, 128}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "must have H = 4 heads like q");
  run([](Gdn& f) { f.gg->set_dim({300, 4}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "input g has dims [300,4] but must be [300,8]");
  run([](Gdn& f) { f.beta->set_dim({300, 8, 1}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "input beta must have 2 dims");
  run([](Gdn& f) { f.cu->set_dim({1}); }, ErrorCode::SHAPE_DEDUCTION_FAILED, "cu_seqlens [1] must be [N+1] with N >= 1");
  {
    Gdn f;
    f.h = 4, f.hv = 6;
    f.fwd();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kFwd, "heads of q (4) and v (6) must divide one another");
  }
  {
    Gdn f;
    f.k = 320;
    f.fwd();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kFwd, "head dim K = 320 of q exceeds 256");
  }
  {
    Gdn f;
    f.v = 512;
    f.fwd();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kFwd, "head dim V = 512 of v exceeds 256");
  }
}

TEST(GdnReject, Types) {
  auto run = [](auto mutate, ErrorCode code, const std::string& what) {
    Gdn f;
    f.make();
    mutate(f);
    f.fwd();
    expect_fail(f.g, code, kFwd, what);
  };
  run([](Gdn& f) { f.q->set_data_type(DataType::FP8_E4M3); }, ErrorCode::GRAPH_NOT_SUPPORTED, "input q has data type FP8_E4M3");
  run([](Gdn& f) { f.vv->set_data_type(DataType::HALF); }, ErrorCode::GRAPH_NOT_SUPPORTED, "input v has data type HALF but q has BFLOAT16");
  run([](Gdn& f) { f.gg->set_data_type(DataType::INT32); }, ErrorCode::GRAPH_NOT_SUPPORTED, "input g has data type INT32");
  run([](Gdn& f) { f.beta->set_data_type(DataType::HALF); }, ErrorCode::GRAPH_NOT_SUPPORTED, "input beta has data type HALF");
  run([](Gdn& f) { f.cu->set_data_type(DataType::FLOAT); }, ErrorCode::GRAPH_NOT_SUPPORTED, "input cu_seqlens has data type FLOAT");
}

TEST(GdnReject, AttributesAndStates) {
  auto run = [](auto mutate, ErrorCode code, const std::string& what) {
    Gdn f;
    f.make();
    mutate(f);
    auto out = f.fwd();
    expect_fail(f.g, code, kFwd, what);
  };
  run([](Gdn& f) { f.attrs.set("scale", 0.0); }, ErrorCode::INVALID_VALUE, "scale 0.000000 must be a finite value > 0");
  run([](Gdn& f) { f.attrs.set("checkpoint_every_n_tokens", -64); }, ErrorCode::INVALID_VALUE,
      "checkpoint_every_n_tokens -64 must be >= 0");
  run([](Gdn& f) { f.attrs.set("gate_domain", "exp"); }, ErrorCode::INVALID_VALUE, "gate_domain");
  run([](Gdn& f) { f.attrs.input("a_log", input(f.g, "alog", {8}, DataType::FLOAT)); }, ErrorCode::ATTRIBUTE_NOT_SET,
      "input a_log is given but safe_gate is not set");
  run([](Gdn& f) { f.attrs.set("safe_gate", true); }, ErrorCode::ATTRIBUTE_NOT_SET, "safe_gate needs input a_log");
  run([](Gdn& f) { f.attrs.set("safe_gate", true).input("a_log", input(f.g, "alog", {4}, DataType::FLOAT)); },
      ErrorCode::SHAPE_DEDUCTION_FAILED, "input a_log has dims [4] but must be [8]");
  run([](Gdn& f) { f.attrs.input("initial_state", input(f.g, "h0", {3, 8, 128, 64}, DataType::FLOAT)); },
      ErrorCode::SHAPE_DEDUCTION_FAILED, "input initial_state has dims [3,8,128,64] but must be [3,8,64,128]");
  run([](Gdn& f) { f.attrs.input("initial_state", input(f.g, "h0", {3, 8, 64, 128}, DataType::HALF)); },
      ErrorCode::GRAPH_NOT_SUPPORTED, "input initial_state has data type HALF");
  run([](Gdn& f) { f.attrs.input("state_indices", input(f.g, "idx", {3}, DataType::INT32)); }, ErrorCode::ATTRIBUTE_NOT_SET,
      "input state_indices is given but initial_state is not set");
  run(
      [](Gdn& f) {
        f.attrs.input("initial_state", input(f.g, "pool", {16, 8, 64, 128}, DataType::FLOAT))
            .input("state_indices", input(f.g, "idx", {4}, DataType::INT32));
      },
      ErrorCode::SHAPE_DEDUCTION_FAILED, "input state_indices has dims [4] but must be [3]");
  run([](Gdn& f) { f.attrs.set("overwrite_initial_state", true); }, ErrorCode::ATTRIBUTE_NOT_SET,
      "overwrite_initial_state needs input initial_state");
}

TEST(GdnReject, AbsentOutputsCannotBeGraphOutputs) {
  {
    Gdn f;
    auto out = f.fwd();
    out[1]->set_output(true);
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kFwd, "output final_state is marked as a graph output but output_final_state is false");
  }
  {
    Gdn f;
    auto out = f.fwd();
    out[2]->set_output(true);
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kFwd, "output state_checkpoints");
  }
  {
    Gdn f;
    f.attrs.set("output_final_state", true);
    auto out = f.fwd();
    out[1]->set_data_type(DataType::HALF);
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kFwd, "output final_state has data type HALF");
  }
}

// ---- backward

struct GdnBwd : Gdn {
  TensorPtr dO;
  GdnBwd() { attrs.set_name("lin_bwd"); }
  std::array<TensorPtr, 8> bwd() {
    if (!q) make();
    if (!dO) dO = input(g, "dO", {t, ho(), v}, dt);
    return g.gdn_bwd(q, kk, vv, gg, beta, cu, dO, attrs);
  }
};

TEST(GdnBwdInfer, GradientsFollowInputs) {
  GdnBwd b;
  b.make();
  b.attrs.input("initial_state", input(b.g, "h0", {3, 8, 64, 128}, DataType::FLOAT))
      .input("d_final_state", input(b.g, "dht", {3, 8, 64, 128}, DataType::FLOAT))
      .set("checkpoint_every_n_tokens", 64)
      .input("state_checkpoints", input(b.g, "ckpt", {300 / 64 + 3, 8, 64, 128}, DataType::BFLOAT16))
      .set("safe_gate", true)
      .input("a_log", input(b.g, "alog", {8}, DataType::FLOAT))
      .input("dt_bias", input(b.g, "dtb", {8}, DataType::BFLOAT16));
  auto out = b.bwd();
  for (auto& o : out) o->set_output(true);
  ASSERT_TRUE(b.g.validate().is_good()) << b.g.validate().to_string();
  EXPECT_EQ(out[0]->get_dim(), (Dims{300, 4, 128}));
  EXPECT_EQ(out[0]->get_stride(), (Dims{4 * 128, 128, 1}));
  EXPECT_EQ(out[0]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(out[1]->get_dim(), (Dims{300, 4, 128}));
  EXPECT_EQ(out[2]->get_dim(), (Dims{300, 8, 64}));
  EXPECT_EQ(out[3]->get_dim(), (Dims{300, 8}));
  EXPECT_EQ(out[3]->get_data_type(), DataType::FLOAT);  // dG in g's type
  EXPECT_EQ(out[4]->get_dim(), (Dims{300, 8}));
  EXPECT_EQ(out[5]->get_dim(), (Dims{3, 8, 64, 128}));
  EXPECT_EQ(out[5]->get_data_type(), DataType::FLOAT);
  EXPECT_EQ(out[6]->get_dim(), (Dims{8}));
  EXPECT_EQ(out[7]->get_dim(), (Dims{8}));
  EXPECT_EQ(out[7]->get_data_type(), DataType::BFLOAT16);
}

TEST(GdnBwdInfer, AbsentGradients) {
  GdnBwd b;
  auto out = b.bwd();
  ASSERT_TRUE(b.g.validate().is_good()) << b.g.validate().to_string();
  EXPECT_EQ(out[5]->get_dim(), (Dims{0, 0, 0, 0}));
  EXPECT_EQ(out[6]->get_dim(), (Dims{0}));
  EXPECT_EQ(out[7]->get_dim(), (Dims{0}));
}

TEST(GdnBwdReject, Rules) {
  {
    GdnBwd b;
    b.make();
    b.dO = input(b.g, "dO", {300, 4, 64}, b.dt);
    b.bwd();
    expect_fail(b.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwd, "input dO has dims [300,4,64] but must be [300,8,64]");
  }
  {
    GdnBwd b;
    b.make();
    b.attrs.input("state_checkpoints", input(b.g, "ckpt", {7, 8, 64, 128}, DataType::BFLOAT16));
    b.bwd();
    expect_fail(b.g, ErrorCode::ATTRIBUTE_NOT_SET, kBwd, "checkpoint_every_n_tokens (its cadence) is not set");
  }
  {
    GdnBwd b;
    b.make();
    b.attrs.set("checkpoint_every_n_tokens", 64).input("state_checkpoints", input(b.g, "ckpt", {5, 8, 64, 128}, DataType::BFLOAT16));
    b.bwd();
    expect_fail(b.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwd, "input state_checkpoints has dims [5,8,64,128] but must be [7,8,64,128]");
  }
  {
    GdnBwd b;
    b.make();
    b.attrs.input("d_final_state", input(b.g, "dht", {2, 8, 64, 128}, DataType::FLOAT));
    b.bwd();
    expect_fail(b.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwd, "input d_final_state has dims");
  }
  {
    GdnBwd b;
    auto out = b.bwd();
    out[5]->set_output(true);
    expect_fail(b.g, ErrorCode::ATTRIBUTE_NOT_SET, kBwd, "output d_initial_state is marked as a graph output but input initial_state is not set");
  }
  {
    GdnBwd b;
    b.make();
    b.q->set_data_type(DataType::INT8);
    b.bwd();
    expect_fail(b.g, ErrorCode::GRAPH_NOT_SUPPORTED, kBwd, "input q has data type INT8");
  }
}

}  // namespace
