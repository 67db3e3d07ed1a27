// SPDX-License-Identifier: Apache-2.0
// SDPA, SDPA_BACKWARD, SDPA_FP8, SDPA_FP8_BACKWARD: inference of dims/strides/types and every rule.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

namespace {

const std::string kNode = "sdpa \"attn\"";
const std::string kBwdNode = "sdpa_backward \"attn_bwd\"";

// A forward graph with Q [B,Hq,Sq,Dqk], K [B,Hk,Skv,Dqk], V [B,Hv,Skv,Dv].
struct Fwd {
  Graph g;
  TensorPtr q, k, v;
  std::array<TensorPtr, 5> out;
  NodeAttrs attrs;
  int64_t b = 2, hq = 8, hk = 2, sq = 128, skv = 256, d = 64, dv = 64;
  DataType dt = DataType::HALF;

  Fwd() {
    g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    attrs.set_name("attn");
  }
  void make_qkv() {
    q = input(g, "q", {b, hq, sq, d}, dt);
    k = input(g, "k", {b, hk, skv, d}, dt);
    v = input(g, "v", {b, hk, skv, dv}, dt);
  }
  void build() {
    if (!q) make_qkv();
    out = g.sdpa(q, k, v, attrs);
  }
  Status validate() { return g.validate(); }
};

TEST(SdpaInfer, ForwardGqaDimsStridesTypes) {
  Fwd f;
  f.attrs.set("generate_stats", true);
  f.build();
  f.out[0]->set_output(true);
  f.out[1]->set_output(true);
  ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
  EXPECT_EQ(f.out[0]->get_dim(), (Dims{2, 8, 128, 64}));
  EXPECT_EQ(f.out[0]->get_stride(), (Dims{8 * 128 * 64, 128 * 64, 64, 1}));
  EXPECT_EQ(f.out[0]->get_data_type(), DataType::HALF);
  EXPECT_EQ(f.out[1]->get_dim(), (Dims{2, 8, 128, 1}));
  EXPECT_EQ(f.out[1]->get_stride(), (Dims{8 * 128, 128, 1, 1}));
  EXPECT_EQ(f.out[1]->get_data_type(), DataType::FLOAT);
  for (int i : {2, 3}) {  // Max, Sum_exp
    EXPECT_EQ(f.out[size_t(i)]->get_dim(), (Dims{2, 8, 128, 1}));
    EXPECT_EQ(f.out[size_t(i)]->get_data_type(), DataType::FLOAT);
  }
  EXPECT_EQ(f.out[4]->get_dim(), (Dims{0, 0, 0, 0}));  // RNG_dump: no dropout
}

TEST(SdpaInfer, OutputFollowsBshdLayoutAndBf16) {
  Fwd f;
  f.dt = DataType::BFLOAT16;
  // Q stored as [B,S,H,D]: strides of dims [B,H,S,D].
  f.q = input(f.g, "q", {2, 8, 128, 64}, f.dt, {128 * 8 * 64, 64, 8 * 64, 1});
  f.k = input(f.g, "k", {2, 8, 256, 64}, f.dt, {256 * 8 * 64, 64, 8 * 64, 1});
  f.v = input(f.g, "v", {2, 8, 256, 64}, f.dt, {256 * 8 * 64, 64, 8 * 64, 1});
  f.build();
  ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
  EXPECT_EQ(f.out[0]->get_stride(), (Dims{128 * 8 * 64, 64, 8 * 64, 1}));
  EXPECT_EQ(f.out[0]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(f.out[1]->get_dim(), (Dims{2, 8, 128, 1}));  // Stats has dims even when not generated
}

TEST(SdpaInfer, MlaHeadDims) {
  Fwd f;
  f.d = 192;
  f.dv = 128;
  f.build();
  ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
  EXPECT_EQ(f.out[0]->get_dim(), (Dims{2, 8, 128, 128}));
}

TEST(SdpaInfer, PaddingRaggedMixedSeqLensDropoutBiasSink) {
  Fwd f;
  f.make_qkv();
  auto ro = input(f.g, "ro", {3, 1, 1, 1}, DataType::INT32);
  f.q->set_ragged_offset(ro);
  f.attrs.set("use_padding_mask", true).set("dropout_probability", 0.1).set("left_bound", 64).set("right_bound", 0);
  f.attrs.input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32));
  f.attrs.input("cu_seq_len_kv", input(f.g, "cukv", {3, 1, 1, 1}, DataType::INT64));
  f.attrs.input("seed", f.g.tensor(Scalar::of_int64(1)));
  f.attrs.input("offset", f.g.tensor(Scalar::of_int64(2)));
  f.attrs.input("bias", input(f.g, "bias", {1, 8, 128, 256}, DataType::HALF));
  f.attrs.input("sink_token", input(f.g, "sink", {1, 8, 1, 1}, DataType::FLOAT));
  f.build();
  f.out[0]->set_ragged_offset(ro);
  f.out[4]->set_output(true);
  ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
  EXPECT_EQ(f.out[4]->get_dim(), (Dims{2, 8, 128, 256}));
  EXPECT_EQ(f.out[4]->get_data_type(), DataType::FLOAT);
}

TEST(SdpaInfer, PagedKv) {
  Fwd f;
  f.q = input(f.g, "q", {2, 8, 1, 128}, DataType::HALF);
  f.k = input(f.g, "kc", {40, 2, 64, 128}, DataType::HALF);
  f.v = input(f.g, "vc", {40, 2, 64, 128}, DataType::HALF);
  f.attrs.set("use_padding_mask", true).set("max_seq_len_kv", 300);
  f.attrs.input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32));
  f.attrs.input("seq_len_kv", input(f.g, "slkv", {2, 1, 1, 1}, DataType::INT32));
  f.attrs.input("page_table_k", input(f.g, "ptk", {2, 1, 5, 1}, DataType::INT32));
  f.attrs.input("page_table_v", input(f.g, "ptv", {2, 1, 5, 1}, DataType::INT32));
  f.attrs.input("bias", input(f.g, "bias", {2, 1, 1, 300}, DataType::HALF));
  f.build();
  ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
  EXPECT_EQ(f.out[0]->get_dim(), (Dims{2, 8, 1, 128}));
}

// ---- forward rejections

TEST(SdpaReject, RankAndTypes) {
  {
    Fwd f;
    f.q = input(f.g, "q", {2, 128, 64}, DataType::HALF);
    f.k = input(f.g, "k", {2, 2, 256, 64}, DataType::HALF);
    f.v = input(f.g, "v", {2, 2, 256, 64}, DataType::HALF);
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "input Q must have 4 dims");
  }
  for (DataType t : {DataType::FLOAT, DataType::DOUBLE}) {
    Fwd f;
    f.dt = t;
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "I/O is not supported: input Q");
  }
  {
    Fwd f;
    f.make_qkv();
    f.k->set_data_type(DataType::BFLOAT16);
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input K has data type BFLOAT16 but Q has HALF");
  }
  {
    Fwd f;
    f.dt = DataType::FP8_E4M3;
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input Q has data type FP8_E4M3");
  }
  {
    Fwd f;
    f.build();
    f.out[0]->set_data_type(DataType::FLOAT);
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "output O has data type FLOAT");
  }
}

TEST(SdpaReject, HeadDims) {
  auto run = [](int64_t d, int64_t dv, ErrorCode code, const std::string& what) {
    Fwd f;
    f.d = d;
    f.dv = dv;
    f.build();
    expect_fail(f.g, code, kNode, what);
  };
  run(100, 64, ErrorCode::GRAPH_NOT_SUPPORTED, "head dim 100 of Q is not a multiple of 8");
  run(64, 68, ErrorCode::GRAPH_NOT_SUPPORTED, "head dim 68 of V is not a multiple of 8");
  {
    Fwd f;
    f.make_qkv();
    f.k->set_dim({2, 2, 256, 128});
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "head dim of K");
  }
}

// cuDNN serves fp16/bf16 head dims above 256 and d_v > d_qk on Hopper (cuDNN 9.10+): validation takes them.
TEST(SdpaInfer, LargeHeadDimsAndWiderV) {
  for (auto [d, dv] : {std::pair<int64_t, int64_t>{320, 320}, {264, 520}, {64, 128}, {32, 96}}) {
    Fwd f;
    f.d = d;
    f.dv = dv;
    f.build();
    ASSERT_TRUE(f.validate().is_good()) << d << "/" << dv << ": " << f.validate().to_string();
    EXPECT_EQ(f.out[0]->get_dim(), (Dims{2, 8, 128, dv}));
  }
}

TEST(SdpaReject, BatchSeqAndHeads) {
  {
    Fwd f;
    f.make_qkv();
    f.k->set_dim({3, 2, 256, 64});
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "batch of K");
  }
  {
    Fwd f;
    f.make_qkv();
    f.v->set_dim({2, 2, 255, 64});
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "sequence length of K");
  }
  {
    Fwd f;
    f.hk = 3;
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "Q heads (8) must be a multiple of K heads (3)");
  }
  {
    Fwd f;
    f.make_qkv();
    f.v->set_dim({2, 3, 256, 64});
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "V heads (3)");
  }
  {
    Graph g;
    auto q = input(g, "q", {2, 8, 128, 64}, DataType::HALF);
    auto k = input(g, "k", {2, 8, 128, 64}, DataType::HALF);
    g.sdpa(q, k, nullptr, NodeAttrs().set_name("attn"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "input V is not set");
  }
}

TEST(SdpaReject, AttnScaleBothForms) {
  Fwd f;
  f.attrs.set("attn_scale_value", 0.125).input("attn_scale", f.g.tensor(Scalar::of_float(0.125f)));
  f.build();
  expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "attn_scale_value and the attn_scale tensor are both set");
}

TEST(SdpaReject, SeqLensAndPadding) {
  {
    Fwd f;
    f.attrs.input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32));
    f.attrs.input("seq_len_kv", input(f.g, "slkv", {2, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "seq_len_q is given but use_padding_mask is not set");
  }
  {
    Fwd f;
    f.attrs.set("use_padding_mask", true).input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "use_padding_mask needs seq_len_kv or cu_seq_len_kv");
  }
  {
    Fwd f;
    f.attrs.set("use_padding_mask", true)
        .input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32))
        .input("cu_seq_len_q", input(f.g, "cuq", {3, 1, 1, 1}, DataType::INT32))
        .input("seq_len_kv", input(f.g, "slkv", {2, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "seq_len_q and cu_seq_len_q are both set");
  }
  {
    Fwd f;
    f.attrs.set("use_padding_mask", true)
        .input("seq_len_q", input(f.g, "slq", {2, 1, 1}, DataType::INT32))
        .input("seq_len_kv", input(f.g, "slkv", {2, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "input seq_len_q has dims [2,1,1]");
  }
  {
    Fwd f;
    f.attrs.set("use_padding_mask", true)
        .input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT64))
        .input("seq_len_kv", input(f.g, "slkv", {2, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input seq_len_q has data type INT64");
  }
  {
    Fwd f;
    f.attrs.set("use_padding_mask", true)
        .input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32))
        .input("cu_seq_len_kv", input(f.g, "cukv", {2, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "input cu_seq_len_kv has dims [2,1,1,1]");
  }
  {
    Fwd f;
    f.make_qkv();
    f.k->set_ragged_offset(input(f.g, "ro", {3, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "K has a ragged offset (THD layout)");
  }
  {
    Fwd f;
    f.make_qkv();
    f.q->set_ragged_offset(input(f.g, "ro", {2, 1, 1, 1}, DataType::INT32));
    f.attrs.set("use_padding_mask", true)
        .input("cu_seq_len_q", input(f.g, "cuq", {3, 1, 1, 1}, DataType::INT32))
        .input("cu_seq_len_kv", input(f.g, "cukv", {3, 1, 1, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "ragged offset of Q has dims [2,1,1,1]");
  }
  {
    Fwd f;
    f.attrs.set("generate_stats", true);
    f.build();
    f.out[1]->set_ragged_offset(input(f.g, "ro", {3, 1, 1, 1}, DataType::INT32));
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "Stats has a ragged offset (THD layout)");
  }
}

TEST(SdpaReject, Dropout) {
  {
    Fwd f;
    f.attrs.set("dropout_probability", 1.0)
        .input("seed", f.g.tensor(Scalar::of_int64(1)))
        .input("offset", f.g.tensor(Scalar::of_int64(2)));
    f.build();
    expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "dropout_probability 1.000000 is outside [0, 1)");
  }
  {
    Fwd f;
    f.attrs.set("dropout_probability", -0.5);
    f.build();
    expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "is outside [0, 1)");
  }
  {
    Fwd f;
    f.attrs.set("dropout_probability", 0.1);
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "needs seed and offset");
  }
  {
    Fwd f;
    f.attrs.set("dropout_probability", 0.1).input("seed", f.g.tensor(Scalar::of_int64(1)));
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "offset is not set");
  }
  {
    Fwd f;
    f.attrs.input("dropout_mask", input(f.g, "m", {2, 8, 128, 256}, DataType::HALF));
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "dropout_scale is not set");
  }
  {
    Fwd f;
    f.attrs.set("dropout_probability", 0.1)
        .input("seed", f.g.tensor(Scalar::of_int64(1)))
        .input("offset", f.g.tensor(Scalar::of_int64(2)))
        .input("dropout_mask", input(f.g, "m", {2, 8, 128, 256}, DataType::HALF))
        .input("dropout_scale", f.g.tensor(Scalar::of_float(1.1f)));
    f.build();
    expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "not both");
  }
  {
    Fwd f;
    f.attrs.input("dropout_mask", input(f.g, "m", {2, 8, 128, 255}, DataType::HALF))
        .input("dropout_scale", f.g.tensor(Scalar::of_float(1.1f)));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "dropout_mask [2,8,128,255] does not broadcast");
  }
  {
    Fwd f;
    f.attrs.set("dropout_probability", 0.1)
        .input("seed", f.g.tensor(Scalar::of_float(1.0f)))
        .input("offset", f.g.tensor(Scalar::of_int64(2)));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input seed has data type FLOAT");
  }
  {
    Fwd f;  // mask dropout validates; RNG_dump is absent and cannot be an output
    f.attrs.input("dropout_mask", input(f.g, "m", {1, 1, 128, 256}, DataType::HALF))
        .input("dropout_scale", f.g.tensor(Scalar::of_float(1.1f)));
    f.build();
    ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
    f.out[4]->set_output(true);
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "output RNG_dump is marked as a graph output");
  }
}

TEST(SdpaReject, BoundsAndAlibi) {
  auto run = [](auto set, ErrorCode code, const std::string& what, int64_t sq = 128) {
    Fwd f;
    f.sq = sq;
    set(f.attrs);
    f.build();
    expect_fail(f.g, code, kNode, what);
  };
  run([](NodeAttrs& a) { a.set("left_bound", 0); }, ErrorCode::INVALID_VALUE, "left_bound 0 must be >= 1");
  run([](NodeAttrs& a) { a.set("right_bound", -1); }, ErrorCode::INVALID_VALUE, "right_bound -1 must be >= 0");
  run([](NodeAttrs& a) { a.set("use_alibi_mask", true); }, ErrorCode::GRAPH_NOT_SUPPORTED,
      "use_alibi_mask requires right_bound = 0 (causal), not unset");
  run([](NodeAttrs& a) { a.set("use_alibi_mask", true).set("right_bound", 4); }, ErrorCode::GRAPH_NOT_SUPPORTED,
      "use_alibi_mask requires right_bound = 0 (causal), not 4");
  run([](NodeAttrs& a) { a.set("right_bound", 0).set("diagonal_alignment", "BOTTOM_RIGHT"); },
      ErrorCode::GRAPH_NOT_SUPPORTED, "a bottom-right diagonal band without a padding mask requires s_q (512) <= s_kv (256)",
      512);
  run([](NodeAttrs& a) { a.set("use_alibi_mask", true).set("right_bound", 0).set("diagonal_alignment", "BOTTOM_RIGHT"); },
      ErrorCode::GRAPH_NOT_SUPPORTED, "a bottom-right diagonal band is not supported with bias, use_alibi_mask or dropout");
  run([](NodeAttrs& a) {
        a.set("right_bound", 0).set("diagonal_alignment", "BOTTOM_RIGHT").set("dropout_probability", 0.1);
      },
      ErrorCode::GRAPH_NOT_SUPPORTED, "a bottom-right diagonal band is not supported with bias");
  run([](NodeAttrs& a) { a.set("left_bound", 16).set("right_bound", 0); }, ErrorCode::GRAPH_NOT_SUPPORTED,
      "left_bound without a padding mask requires s_q (512) <= s_kv (256)", 512);
  run([](NodeAttrs& a) { a.set("diagonal_alignment", "MIDDLE"); }, ErrorCode::INVALID_VALUE, "diagonal_alignment");
  // Alibi with a causal mask validates.
  Fwd ok;
  ok.attrs.set("use_alibi_mask", true).set("right_bound", 0);
  ok.build();
  EXPECT_TRUE(ok.validate().is_good()) << ok.validate().to_string();
}

TEST(SdpaReject, BiasSinkBlockMask) {
  {
    Fwd f;
    f.attrs.input("bias", input(f.g, "bias", {2, 4, 128, 256}, DataType::HALF));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "input bias [2,4,128,256] does not broadcast");
  }
  {
    Fwd f;
    f.attrs.input("bias", input(f.g, "bias", {1, 1, 128, 256}, DataType::BOOLEAN));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input bias is BOOLEAN");
  }
  {
    Fwd f;
    f.attrs.input("sink_token", input(f.g, "sink", {1, 2, 1, 1}, DataType::FLOAT));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "input sink_token has dims [1,2,1,1]");
  }
  {
    Fwd f;
    f.attrs.input("sink_token", input(f.g, "sink", {1, 8, 1, 1}, DataType::HALF));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input sink_token has data type HALF");
  }
  {
    Fwd f;
    f.sq = 1;
    f.attrs.input("sink_token", input(f.g, "sink", {1, 8, 1, 1}, DataType::FLOAT));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "sink_token is not supported in decode mode (s_q == 1)");
  }
  {
    Fwd f;
    f.attrs.set("implementation", "COMPOSITE").input("block_mask", input(f.g, "bm", {2, 8, 1, 2}, DataType::UINT8));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "block_mask needs implementation UNIFIED");
  }
  {
    Fwd f;
    f.attrs.input("block_mask", input(f.g, "bm", {2, 8, 1, 3}, DataType::UINT8));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "block_mask [2,8,1,3] does not broadcast");
  }
}

TEST(SdpaReject, StatsNeedsGenerateStats) {
  Fwd f;
  f.build();
  f.out[1]->set_output(true);
  expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "output Stats is marked as a graph output but generate_stats is false");
}

TEST(SdpaReject, Paged) {
  auto make = [](Fwd& f) {
    f.q = input(f.g, "q", {2, 8, 1, 128}, DataType::HALF);
    f.k = input(f.g, "kc", {40, 2, 64, 128}, DataType::HALF);
    f.v = input(f.g, "vc", {40, 2, 64, 128}, DataType::HALF);
    f.attrs.input("seq_len_q", input(f.g, "slq", {2, 1, 1, 1}, DataType::INT32));
    f.attrs.input("seq_len_kv", input(f.g, "slkv", {2, 1, 1, 1}, DataType::INT32));
    f.attrs.input("page_table_k", input(f.g, "ptk", {2, 1, 5, 1}, DataType::INT32));
  };
  {
    Fwd f;
    make(f);
    f.attrs.set("use_padding_mask", true).set("max_seq_len_kv", 300);
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "page_table_v is not set");
  }
  {
    Fwd f;
    make(f);
    f.attrs.set("max_seq_len_kv", 300).input("page_table_v", input(f.g, "ptv", {2, 1, 5, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "requires use_padding_mask");
  }
  {
    Fwd f;
    make(f);
    f.attrs.set("use_padding_mask", true).input("page_table_v", input(f.g, "ptv", {2, 1, 5, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::ATTRIBUTE_NOT_SET, kNode, "requires attribute max_seq_len_kv");
  }
  {
    Fwd f;
    make(f);
    f.attrs.set("use_padding_mask", true).set("max_seq_len_kv", 300);
    f.attrs.input("page_table_v", input(f.g, "ptv", {2, 1, 4, 1}, DataType::INT32));
    f.build();
    expect_fail(f.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kNode, "input page_table_v has dims [2,1,4,1] but must be [2,1,5,1]");
  }
  {
    Fwd f;
    make(f);
    f.attrs.set("use_padding_mask", true).set("max_seq_len_kv", 300);
    f.attrs.input("page_table_v", input(f.g, "ptv", {2, 1, 5, 1}, DataType::INT64));
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "input page_table_v has data type INT64");
  }
  {
    Fwd f;
    f.attrs.set("max_seq_len_kv", 256);
    f.build();
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "max_seq_len_kv is only used with paged K/V");
  }
}

// ---- backward

struct Bwd {
  Graph g;
  TensorPtr q, k, v, o, dO, stats;
  std::array<TensorPtr, 6> out;
  NodeAttrs attrs;
  DataType dt = DataType::BFLOAT16;
  Bwd() {
    g.set_io_data_type(dt).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    attrs.set_name("attn_bwd");
    q = input(g, "q", {2, 8, 128, 64}, dt);
    k = input(g, "k", {2, 4, 256, 64}, dt, {256 * 4 * 64, 64, 4 * 64, 1});  // BSHD
    v = input(g, "v", {2, 4, 256, 64}, dt);
    o = input(g, "o", {2, 8, 128, 64}, dt);
    dO = input(g, "dO", {2, 8, 128, 64}, dt);
    stats = input(g, "stats", {2, 8, 128, 1}, DataType::FLOAT);
  }
  void build() { out = g.sdpa_backward(q, k, v, o, dO, stats, attrs); }
};

TEST(SdpaBwdInfer, GradientsFollowInputs) {
  Bwd b;
  b.attrs.input("bias", input(b.g, "bias", {1, 8, 128, 256}, DataType::BFLOAT16));
  b.attrs.input("sink_token", input(b.g, "sink", {1, 8, 1, 1}, DataType::FLOAT));
  b.build();
  for (size_t i = 0; i < 5; ++i) b.out[i]->set_output(true);  // RNG_dump: no dropout, stays virtual
  ASSERT_TRUE(b.g.validate().is_good()) << b.g.validate().to_string();
  EXPECT_EQ(b.out[5]->get_dim(), (Dims{0, 0, 0, 0}));
  EXPECT_EQ(b.out[0]->get_dim(), (Dims{2, 8, 128, 64}));
  EXPECT_EQ(b.out[1]->get_dim(), (Dims{2, 4, 256, 64}));
  EXPECT_EQ(b.out[1]->get_stride(), (Dims{256 * 4 * 64, 64, 4 * 64, 1}));
  EXPECT_EQ(b.out[2]->get_dim(), (Dims{2, 4, 256, 64}));
  for (int i : {0, 1, 2}) EXPECT_EQ(b.out[size_t(i)]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(b.out[3]->get_dim(), (Dims{1, 8, 128, 256}));
  EXPECT_EQ(b.out[3]->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(b.out[4]->get_dim(), (Dims{1, 8, 1, 1}));
  EXPECT_EQ(b.out[4]->get_data_type(), DataType::FLOAT);
}

TEST(SdpaBwdInfer, AbsentGradientsAreZeroSize) {
  Bwd b;
  b.build();
  ASSERT_TRUE(b.g.validate().is_good()) << b.g.validate().to_string();
  EXPECT_EQ(b.out[3]->get_dim(), (Dims{0, 0, 0, 0}));
  EXPECT_EQ(b.out[4]->get_dim(), (Dims{0, 0, 0, 0}));
}

TEST(SdpaBwdReject, Rules) {
  {
    Bwd b;
    b.stats->set_dim({2, 8, 128});
    b.build();
    expect_fail(b.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwdNode, "input Stats must have 4 dims");
  }
  {
    Bwd b;
    b.stats->set_dim({2, 8, 64, 1});
    b.build();
    expect_fail(b.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwdNode, "input Stats has dims [2,8,64,1] but must be [2,8,128,1]");
  }
  {
    Bwd b;
    b.stats->set_data_type(DataType::HALF);
    b.build();
    expect_fail(b.g, ErrorCode::GRAPH_NOT_SUPPORTED, kBwdNode, "input Stats has data type HALF");
  }
  {
    Bwd b;
    b.dO->set_dim({2, 8, 128, 32});
    b.build();
    expect_fail(b.g, ErrorCode::SHAPE_DEDUCTION_FAILED, kBwdNode, "input dO has dims");
  }
  {
    Bwd b;
    b.o->set_data_type(DataType::FLOAT);
    b.build();
    expect_fail(b.g, ErrorCode::GRAPH_NOT_SUPPORTED, kBwdNode, "FLOAT I/O is not supported: input O");
  }
  {
    Bwd b;
    b.build();
    b.out[3]->set_output(true);
    expect_fail(b.g, ErrorCode::ATTRIBUTE_NOT_SET, kBwdNode, "output dBias is marked as a graph output but input bias is not set");
  }
  {
    Bwd b;
    b.build();
    b.out[4]->set_output(true);
    expect_fail(b.g, ErrorCode::ATTRIBUTE_NOT_SET, kBwdNode, "output dSink_token");
  }
  {
    Bwd b;
    b.attrs.input("dropout_mask", input(b.g, "m", {2, 8, 128, 256}, DataType::BFLOAT16))
        .input("dropout_scale", b.g.tensor(Scalar::of_float(1.1f)));
    b.build();
    expect_fail(b.g, ErrorCode::ATTRIBUTE_NOT_SET, kBwdNode, "needs dropout_scale_inv");
  }
  {
    Bwd b;
    b.attrs.set("max_total_seq_len_q", 0);
    b.build();
    expect_fail(b.g, ErrorCode::INVALID_VALUE, kBwdNode, "max_total_seq_len_q 0 must be >= 1");
  }
  {
    Bwd b;
    b.dO->set_ragged_offset(input(b.g, "ro", {3, 1, 1, 1}, DataType::INT32));
    b.build();
    expect_fail(b.g, ErrorCode::GRAPH_NOT_SUPPORTED, kBwdNode, "dO has a ragged offset");
  }
  {
    Bwd b;
    b.attrs.set("use_padding_mask", true)
        .input("seq_len_q", input(b.g, "slq", {2, 1, 1, 1}, DataType::INT32))
        .input("seq_len_kv", input(b.g, "slkv", {2, 1, 1, 1}, DataType::INT32))
        .set("use_deterministic_algorithm", true)
        .set("dropout_probability", 0.2)
        .input("seed", b.g.tensor(Scalar::of_int32(3)))
        .input("offset", b.g.tensor(Scalar::of_int32(4)));
    b.build();
    EXPECT_TRUE(b.g.validate().is_good()) << b.g.validate().to_string();
  }
}

// ---- fp8

struct Fp8Scales {
  std::vector<TensorPtr> t;
  Fp8Scales(Graph& g, int n) {
    for (int i = 0; i < n; ++i) t.push_back(input(g, "s" + std::to_string(i), {1, 1, 1, 1}, DataType::FLOAT));
  }
};

TEST(SdpaFp8Infer, ForwardAndBackward) {
  Graph g;
  g.set_io_data_type(DataType::FP8_E4M3).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto q = input(g, "q", {1, 4, 64, 128}, DataType::FP8_E4M3);
  auto k = input(g, "k", {1, 4, 64, 128}, DataType::FP8_E4M3);
  auto v = input(g, "v", {1, 4, 64, 128}, DataType::FP8_E4M3);
  Fp8Scales s(g, 6);
  auto fo = g.sdpa_fp8(q, k, v, s.t[0], s.t[1], s.t[2], s.t[3], s.t[4], s.t[5],
                       NodeAttrs().set_name("f8").set("generate_stats", true).set("right_bound", 0));
  for (size_t i = 0; i < 6; ++i) fo[i]->set_output(true);  // O, Stats, Amax_S, Amax_O, Max, Sum_exp
  auto dO = input(g, "dO", {1, 4, 64, 128}, DataType::FP8_E5M2);
  Fp8Scales s2(g, 12);
  auto bo = g.sdpa_fp8_backward(q, k, v, fo[0], dO, fo[1], s2.t[0], s2.t[1], s2.t[2], s2.t[3], s2.t[4], s2.t[5],
                                s2.t[6], s2.t[7], s2.t[8], s2.t[9], s2.t[10], s2.t[11], NodeAttrs().set_name("f8b"));
  for (size_t i = 0; i < 7; ++i) bo[i]->set_output(true);  // dSink_token: no sink, stays virtual
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(fo[0]->get_dim(), (Dims{1, 4, 64, 128}));
  EXPECT_EQ(fo[0]->get_data_type(), DataType::FP8_E4M3);
  EXPECT_EQ(fo[1]->get_data_type(), DataType::FLOAT);
  for (int i : {2, 3}) {
    EXPECT_EQ(fo[size_t(i)]->get_dim(), (Dims{1, 1, 1, 1}));
    EXPECT_EQ(fo[size_t(i)]->get_data_type(), DataType::FLOAT);
  }
  for (int i : {0, 1, 2}) {
    EXPECT_EQ(bo[size_t(i)]->get_dim(), (Dims{1, 4, 64, 128}));
    EXPECT_EQ(bo[size_t(i)]->get_data_type(), DataType::FP8_E4M3);
  }
  for (int i : {3, 4, 5, 6}) EXPECT_EQ(bo[size_t(i)]->get_dim(), (Dims{1, 1, 1, 1}));
}

// The fp8 forward takes paged K/V, a sink, the user dropout mask, generated dropout with RNG_dump and the
// Max/Sum_exp outputs; its backward takes the sink (dSink_token) and the (mask, scale, scale_inv) dropout.
TEST(SdpaFp8Infer, PagedSinkDropoutAndExtraOutputs) {
  Graph g;
  g.set_io_data_type(DataType::FP8_E4M3).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto q = input(g, "q", {2, 4, 64, 128}, DataType::FP8_E4M3);
  auto kc = input(g, "kc", {8, 4, 32, 128}, DataType::FP8_E4M3);
  auto vc = input(g, "vc", {8, 4, 32, 128}, DataType::FP8_E4M3);
  Fp8Scales s(g, 6);
  NodeAttrs a;
  a.set_name("f8").set("generate_stats", true).set("use_padding_mask", true).set("max_seq_len_kv", 128);
  a.set("dropout_probability", 0.2).input("seed", g.tensor(Scalar::of_int64(1))).input("offset", g.tensor(Scalar::of_int64(2)));
  a.input("seq_len_q", input(g, "slq", {2, 1, 1, 1}, DataType::INT32)).input("seq_len_kv", input(g, "slkv", {2, 1, 1, 1}, DataType::INT32));
  a.input("page_table_k", input(g, "ptk", {2, 1, 4, 1}, DataType::INT32)).input("page_table_v", input(g, "ptv", {2, 1, 4, 1}, DataType::INT32));
  a.input("sink_token", input(g, "sink", {1, 4, 1, 1}, DataType::FLOAT));
  auto fo = g.sdpa_fp8(q, kc, vc, s.t[0], s.t[1], s.t[2], s.t[3], s.t[4], s.t[5], a);
  for (auto& t : fo) t->set_output(true);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(fo[4]->get_dim(), (Dims{2, 4, 64, 1}));    // Max
  EXPECT_EQ(fo[6]->get_dim(), (Dims{2, 4, 64, 128}));  // RNG_dump

  Graph gb;
  auto bq = input(gb, "q", {1, 4, 64, 128}, DataType::FP8_E4M3);
  Fp8Scales s2(gb, 12);
  NodeAttrs b;
  b.set_name("f8b").input("sink_token", input(gb, "sink", {1, 4, 1, 1}, DataType::FLOAT));
  b.input("dropout_mask", input(gb, "m", {1, 4, 64, 64}, DataType::FLOAT))
      .input("dropout_scale", gb.tensor(Scalar::of_float(1.25f)))
      .input("dropout_scale_inv", gb.tensor(Scalar::of_float(0.8f)));
  auto bo = gb.sdpa_fp8_backward(bq, bq, bq, bq, bq, input(gb, "st", {1, 4, 64, 1}, DataType::FLOAT), s2.t[0], s2.t[1],
                                 s2.t[2], s2.t[3], s2.t[4], s2.t[5], s2.t[6], s2.t[7], s2.t[8], s2.t[9], s2.t[10], s2.t[11], b);
  for (auto& t : bo) t->set_output(true);
  ASSERT_TRUE(gb.validate().is_good()) << gb.validate().to_string();
  EXPECT_EQ(bo[7]->get_dim(), (Dims{1, 4, 1, 1}));  // dSink_token
}

TEST(SdpaFp8Reject, BiasAndForwardOptions) {
  Graph g;
  auto q = input(g, "q", {1, 4, 64, 128}, DataType::FP8_E4M3);
  Fp8Scales s(g, 6);
  g.sdpa_fp8(q, q, q, s.t[0], s.t[1], s.t[2], s.t[3], s.t[4], s.t[5],
             NodeAttrs().set_name("f8").input("bias", input(g, "bias", {1, 4, 64, 64}, DataType::HALF)));
  expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "sdpa_fp8 \"f8\"", "input bias is not supported by FP8 attention");
}

TEST(SdpaBwdInfer, RngDumpWithGeneratedDropout) {
  Bwd b;
  b.attrs.set("dropout_probability", 0.1).input("seed", b.g.tensor(Scalar::of_int64(1))).input("offset", b.g.tensor(Scalar::of_int64(2)));
  b.build();
  b.out[5]->set_output(true);
  ASSERT_TRUE(b.g.validate().is_good()) << b.g.validate().to_string();
  EXPECT_EQ(b.out[5]->get_dim(), (Dims{2, 8, 128, 256}));
  EXPECT_EQ(b.out[5]->get_data_type(), DataType::FLOAT);
}

TEST(SdpaFp8Reject, TypesHeadDimsScales) {
  auto run = [](DataType dt, int64_t d, Dims scale_dims, DataType scale_t, ErrorCode code, const std::string& what) {
    Graph g;
    auto q = input(g, "q", {1, 4, 64, d}, dt);
    auto k = input(g, "k", {1, 4, 64, d}, dt);
    auto v = input(g, "v", {1, 4, 64, d}, dt);
    Fp8Scales s(g, 6);
    s.t[0]->set_dim(scale_dims).set_data_type(scale_t);
    g.sdpa_fp8(q, k, v, s.t[0], s.t[1], s.t[2], s.t[3], s.t[4], s.t[5], NodeAttrs().set_name("f8"));
    expect_fail(g, code, "sdpa_fp8 \"f8\"", what);
  };
  run(DataType::HALF, 128, {1, 1, 1, 1}, DataType::FLOAT, ErrorCode::GRAPH_NOT_SUPPORTED, "input Q has data type HALF");
  run(DataType::FP8_E4M3, 72, {1, 1, 1, 1}, DataType::FLOAT, ErrorCode::GRAPH_NOT_SUPPORTED,
      "head dim 72 of Q is not a multiple of 16");
  run(DataType::FP8_E4M3, 320, {1, 1, 1, 1}, DataType::FLOAT, ErrorCode::GRAPH_NOT_SUPPORTED, "head dim 320 of Q exceeds 256");
  run(DataType::FP8_E4M3, 128, {2, 1, 1, 1}, DataType::FLOAT, ErrorCode::SHAPE_DEDUCTION_FAILED,
      "input descale_q must hold one value");
  run(DataType::FP8_E4M3, 128, {1, 1, 1, 1}, DataType::HALF, ErrorCode::GRAPH_NOT_SUPPORTED,
      "input descale_q has data type HALF");
}

}  // namespace

namespace {

TEST(SdpaMxfp8Infer, ForwardOutputsAndScaleRules) {
  Graph g;
  g.set_io_data_type(DataType::FP8_E4M3).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto q = input(g, "q", {2, 4, 200, 64}, DataType::FP8_E4M3);
  auto sqk = input(g, "sqk", {2, 4, 256, 4}, DataType::FP8_E8M0);  // F8_128x4 padding: S to 256, D/32 to 4
  sqk->set_reordering_type(TensorReordering::F8_128x4);
  auto sv = input(g, "sv", {2, 4, 8, 128}, DataType::FP8_E8M0);  // S/32 = 7 padded to 8, D padded to 128
  auto o = g.sdpa_mxfp8(q, q, q, sqk, sqk, sv, NodeAttrs().set_name("mx").set("generate_stats", true));
  for (auto& t : o) t->set_output(true);
  o[0]->set_data_type(DataType::BFLOAT16);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  EXPECT_EQ(o[0]->get_dim(), (Dims{2, 4, 200, 64}));
  EXPECT_EQ(o[1]->get_dim(), (Dims{2, 4, 200, 1}));
  EXPECT_EQ(o[2]->get_dim(), (Dims{1, 1, 1, 1}));

  Graph bad;
  auto bq = input(bad, "q", {1, 2, 64, 64}, DataType::FP8_E4M3);
  auto fs = input(bad, "fs", {1, 2, 64, 2}, DataType::FLOAT);
  auto vs = input(bad, "vs", {1, 2, 1, 64}, DataType::FP8_E8M0);
  bad.sdpa_mxfp8(bq, bq, bq, fs, fs, vs, NodeAttrs().set_name("mx"));
  expect_fail(bad, ErrorCode::GRAPH_NOT_SUPPORTED, "sdpa_mxfp8 \"mx\"", "input descale_q has data type FLOAT");
  Graph small;
  auto sq2 = input(small, "q", {1, 2, 64, 64}, DataType::FP8_E4M3);
  auto s2 = input(small, "s", {1, 2, 64, 2}, DataType::FP8_E8M0);
  auto v2 = input(small, "vs", {1, 2, 1, 64}, DataType::FP8_E8M0);
  small.sdpa_mxfp8(sq2, sq2, sq2, s2, s2, v2, NodeAttrs().set_name("mx"));
  expect_fail(small, ErrorCode::SHAPE_DEDUCTION_FAILED, "sdpa_mxfp8 \"mx\"", "block scale descale_v [1,2,1,64] does not cover V");
}

}  // namespace

namespace {

// score_mod as a sub-graph: the pointwise nodes built after the SDPA node move into it; validation gives
// them the scores' dims; its externals follow the SDPA node's ports; JSON v2 round-trips it.
TEST(SdpaScoreMod, AttachInferAndSerialize) {
  Fwd f;
  f.attrs.set("generate_stats", true);
  f.build();
  Node& owner = *f.g.mutable_nodes().back();
  const size_t first = f.g.nodes().size();
  auto scores = std::make_shared<TensorAttr>();
  scores->set_is_virtual(true).set_name("scores");
  auto cap = input(f.g, "cap", {1, 1, 1, 1}, DataType::FLOAT);
  auto capped = f.g.mul(f.g.tanh(f.g.div(scores, cap)), cap);
  ASSERT_TRUE(f.g.attach_subgraph(owner, "score_mod", scores, capped, first).is_good());
  EXPECT_EQ(f.g.nodes().size(), first);
  ASSERT_EQ(owner.inputs().size(), owner.num_ports() + 1);  // the cap tensor
  EXPECT_EQ(owner.inputs().back(), cap);
  ASSERT_TRUE(f.validate().is_good()) << f.validate().to_string();
  EXPECT_EQ(scores->get_dim(), (Dims{2, 8, 128, 256}));
  EXPECT_EQ(capped->get_dim(), (Dims{2, 8, 128, 256}));

  Graph copy;
  ASSERT_TRUE(copy.deserialize(f.g.serialize()).is_good());
  const Node& n = *copy.nodes().back();
  ASSERT_NE(n.subgraph("score_mod"), nullptr);
  EXPECT_EQ(n.subgraph("score_mod")->nodes.size(), 3u);
  EXPECT_EQ(n.inputs().size(), n.num_ports() + 1);
  ASSERT_TRUE(copy.validate().is_good()) << copy.validate().to_string();
  EXPECT_EQ(copy.key(), f.g.key());
}

TEST(SdpaScoreMod, Rules) {
  {  // only pointwise ops
    Fwd f;
    f.build();
    Node& owner = *f.g.mutable_nodes().back();
    const size_t first = f.g.nodes().size();
    auto scores = std::make_shared<TensorAttr>();
    auto y = f.g.reduction(scores, NodeAttrs().set("mode", "ADD"));
    Status s = f.g.attach_subgraph(owner, "score_mod", scores, y, first);
    EXPECT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED) << s.to_string();
  }
  {  // the sub-graph's nodes obey the catalogue's generic rules
    Fwd f;
    f.build();
    Node& owner = *f.g.mutable_nodes().back();
    const size_t first = f.g.nodes().size();
    auto scores = std::make_shared<TensorAttr>();
    auto y = f.g.add_node(OpKind::POINTWISE, {scores},
                          NodeAttrs().set("mode", std::string("GEN_INDEX")).set("axis", std::string("two")))[0];
    ASSERT_TRUE(f.g.attach_subgraph(owner, "score_mod", scores, y, first).is_good());
    expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "attribute axis must be of type int");
  }
  {  // a sub-graph's input is its own tensor, not a port of a node
    Fwd f;
    f.build();
    Node& owner = *f.g.mutable_nodes().back();
    const size_t first = f.g.nodes().size();
    ASSERT_TRUE(f.g.attach_subgraph(owner, "score_mod", f.q, f.g.neg(f.q), first).is_good());
    expect_fail(f.g, ErrorCode::INVALID_VALUE, kNode, "belongs to a sub-graph");
  }
  {  // no built-in masks with a score modifier
    Fwd f;
    f.attrs.set("right_bound", 0);
    f.build();
    Node& owner = *f.g.mutable_nodes().back();
    const size_t first = f.g.nodes().size();
    auto scores = std::make_shared<TensorAttr>();
    ASSERT_TRUE(f.g.attach_subgraph(owner, "score_mod", scores, f.g.neg(scores), first).is_good());
    expect_fail(f.g, ErrorCode::GRAPH_NOT_SUPPORTED, kNode, "score_mod replaces the built-in masks");
  }
  {  // a backward needs both halves
    Bwd b;
    b.build();
    Node& owner = *b.g.mutable_nodes().back();
    const size_t first = b.g.nodes().size();
    auto scores = std::make_shared<TensorAttr>();
    ASSERT_TRUE(b.g.attach_subgraph(owner, "score_mod", scores, b.g.neg(scores), first).is_good());
    expect_fail(b.g, ErrorCode::GRAPH_NOT_SUPPORTED, kBwdNode, "needs both score_mod and score_mod_bprop");
  }
}

}  // namespace
