// SPDX-License-Identifier: Apache-2.0
// Inference and validation rules of rng, resample, block scale (de)quantize, moe grouped matmul, rope.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

TEST(OpsMisc, RngDimsFromAttributeOrOutput) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto y = g.rng(NodeAttrs().set_name("r").set("dims", {2, 3}).set("seed_value", 7).set("bernoulli_probability", 0.25));
  auto z = g.rng(NodeAttrs().set_name("r2").set("distribution", "NORMAL").input("seed", g.tensor(Scalar::of_int64(1)))
                     .input("offset", g.tensor(Scalar::of_int64(0))));
  z->set_dim({4, 5}).set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 3}));
  EXPECT_EQ(y->get_stride(), (Dims{3, 1}));
  EXPECT_EQ(z->get_stride(), (Dims{5, 1}));
}

TEST(OpsMisc, RngRejects) {
  {
    Graph g;
    g.rng(NodeAttrs().set_name("r").set("dims", {2}).set("seed_value", 1).set("bernoulli_probability", 1.5));
    expect_fail(g, ErrorCode::INVALID_VALUE, "rng \"r\"", {"bernoulli_probability"});
  }
  {
    Graph g;
    g.rng(NodeAttrs().set_name("r").set("dims", {2}));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "rng \"r\"", {"seed"});
  }
  {
    Graph g;
    g.rng(NodeAttrs().set_name("r").set("seed_value", 1));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "rng \"r\"", {"dims"});
  }
  {
    Graph g;
    g.rng(NodeAttrs().set_name("r").set("dims", {2}).input("seed", g.tensor(Scalar::of_float(1.f))));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "rng \"r\"", {"input seed"});
  }
  {
    Graph g;
    g.rng(NodeAttrs().set_name("r").set("dims", {2}).set("seed_value", 1).input("seed", g.tensor(Scalar::of_int64(1))));
    expect_fail(g, ErrorCode::INVALID_VALUE, "rng \"r\"", {"seed_value"});
  }
}

TEST(OpsMisc, ResampleMaxpoolWithIndex) {
  Graph g;
  g.set_io_data_type(DataType::HALF);
  auto [y, idx] = g.resample(input(g, "x", {2, 3, 9, 8}, DataType::HALF),
                             NodeAttrs().set_name("pool").set("resample_mode", "MAXPOOL").set("window", {3, 2})
                                 .set("stride", {2, 2}).set("pre_padding", {1, 0}).set("post_padding", {1, 0}).set("generate_index", true));
  y->set_output(true);
  idx->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 3, 5, 4}));
  EXPECT_EQ(y->get_stride(), (Dims{60, 20, 4, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::HALF);
  EXPECT_EQ(idx->get_dim(), (Dims{2, 3, 5, 4}));
  EXPECT_EQ(idx->get_data_type(), DataType::INT32);
}

TEST(OpsMisc, ResampleAvgpoolDefaultsStrideToWindowAndUpsampleTakesUserDims) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [y, i1] = g.resample(input(g, "x", {1, 2, 8, 8}), NodeAttrs().set_name("avg").set("resample_mode", "AVGPOOL_INCLUDE_PADDING").set("window", {2, 2}));
  auto [u, i2] = g.resample(input(g, "x2", {1, 2, 8, 8}), NodeAttrs().set_name("up").set("resample_mode", "BILINEAR"));
  u->set_dim({1, 2, 16, 16});
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{1, 2, 4, 4}));
  EXPECT_EQ(u->get_dim(), (Dims{1, 2, 16, 16}));
}

TEST(OpsMisc, ResampleRejects) {
  {
    Graph g;
    g.resample(input(g, "x", {1, 2, 8, 8}), NodeAttrs().set_name("p").set("resample_mode", "AVGPOOL_INCLUDE_PADDING")
                                                .set("window", {2, 2}).set("generate_index", true));
    expect_fail(g, ErrorCode::INVALID_VALUE, "resample \"p\"", {"generate_index needs resample_mode MAXPOOL"});
  }
  {
    Graph g;
    g.resample(input(g, "x", {1, 2, 8, 8}), NodeAttrs().set_name("p").set("resample_mode", "MAXPOOL"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "resample \"p\"", {"window"});
  }
  {
    Graph g;
    g.resample(input(g, "x", {1, 2, 8, 8}), NodeAttrs().set_name("p").set("window", {2, 2}));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "resample \"p\"", {"resample_mode"});
  }
  {
    Graph g;
    auto outs = g.resample(input(g, "x", {1, 2, 8, 8}), NodeAttrs().set_name("p").set("resample_mode", "MAXPOOL")
                                                            .set("window", {2, 2}).set("generate_index", true));
    outs[1]->set_data_type(DataType::HALF);
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "resample \"p\"", {"output Index"});
  }
  {
    Graph g;
    g.resample(input(g, "x", {1, 2, 2, 2}), NodeAttrs().set_name("p").set("resample_mode", "MAXPOOL").set("window", {3, 3}));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "resample \"p\"", {"does not fit"});
  }
}

TEST(OpsMisc, BlockScaleQuantizeMx) {
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16);
  auto x = input(g, "x", {4, 64, 128}, DataType::BFLOAT16);
  auto [y, sc] = g.block_scale_quantize(x, NodeAttrs().set_name("q"));
  auto [yt, sct] = g.block_scale_quantize(x, NodeAttrs().set_name("qt").set("axis", -2).set("transpose", true));
  y->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{4, 64, 128}));
  EXPECT_EQ(y->get_data_type(), DataType::FP8_E4M3);
  EXPECT_EQ(sc->get_dim(), (Dims{4, 64, 4}));
  EXPECT_EQ(sc->get_stride(), (Dims{256, 4, 1}));
  EXPECT_EQ(sc->get_data_type(), DataType::FP8_E8M0);
  EXPECT_EQ(yt->get_dim(), (Dims{4, 128, 64}));
  EXPECT_EQ(sct->get_dim(), (Dims{4, 128, 2}));
}

TEST(OpsMisc, BlockScaleQuantizeRejects) {
  {
    Graph g;
    g.block_scale_quantize(input(g, "x", {4, 48}), NodeAttrs().set_name("q"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "block_scale_quantize \"q\"", {"48 elements on axis 1", "block_size 32"});
  }
  {
    Graph g;
    g.block_scale_quantize(input(g, "x", {4, 64}, DataType::INT8), NodeAttrs().set_name("q"));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "block_scale_quantize \"q\"", {"input X"});
  }
  {
    Graph g;
    auto outs = g.block_scale_quantize(input(g, "x", {4, 64}), NodeAttrs().set_name("q"));
    outs[0]->set_data_type(DataType::HALF);
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "block_scale_quantize \"q\"", {"output Y"});
  }
  {
    Graph g;
    g.block_scale_quantize(input(g, "x", {4, 64}), NodeAttrs().set_name("q").set("block_size", 0));
    expect_fail(g, ErrorCode::INVALID_VALUE, "block_scale_quantize \"q\"", {"block_size 0"});
  }
}

TEST(OpsMisc, BlockScaleDequantize) {
  Graph g;
  g.set_io_data_type(DataType::FP8_E4M3);
  auto y = g.block_scale_dequantize(input(g, "x", {8, 64}, DataType::FP8_E4M3), input(g, "s", {8, 4}, DataType::FP8_E8M0),
                                    NodeAttrs().set_name("dq").set("block_size", 16));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{8, 64}));
  EXPECT_EQ(y->get_data_type(), DataType::FLOAT);
  Graph bad;
  bad.block_scale_dequantize(input(bad, "x", {8, 64}, DataType::FP8_E4M3), input(bad, "s", {8, 2}, DataType::FP8_E8M0),
                             NodeAttrs().set_name("dq").set("block_size", 16));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "block_scale_dequantize \"dq\"", {"input scale has dims [8,2]", "[8,4]"});
  Graph bad2;
  bad2.block_scale_dequantize(input(bad2, "x", {8, 64}, DataType::FP8_E4M3), input(bad2, "s", {8, 1}, DataType::FP8_E8M0),
                              NodeAttrs().set_name("dq").set("block_size", 32));
  expect_fail(bad2, ErrorCode::SHAPE_DEDUCTION_FAILED, "block_scale_dequantize \"dq\"", {"input scale has dims [8,1]", "[8,2]"});
}

TEST(OpsMisc, MoeGroupedMatmulModes) {
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16);
  auto w = input(g, "w", {4, 64, 32}, DataType::BFLOAT16);
  auto off = input(g, "off", {4}, DataType::INT32);
  auto none = g.moe_grouped_matmul(input(g, "t", {12, 64}, DataType::BFLOAT16), w, off, NodeAttrs().set_name("m0"));
  auto gather = g.moe_grouped_matmul(input(g, "t1", {1, 6, 64}, DataType::BFLOAT16), w, off,
                                     NodeAttrs().set_name("m1").set("mode", "GATHER").set("top_k", 2)
                                         .input("token_index", input(g, "ti", {1, 12, 1}, DataType::INT32)));
  auto scatter = g.moe_grouped_matmul(input(g, "t2", {12, 64}, DataType::BFLOAT16), w, off,
                                      NodeAttrs().set_name("m2").set("mode", "SCATTER").set("top_k", 2)
                                          .input("token_index", input(g, "ti2", {12}, DataType::INT64))
                                          .input("token_ks", input(g, "tk2", {12}, DataType::INT32)));
  EXPECT_VALID(g);
  EXPECT_EQ(none->get_dim(), (Dims{12, 32}));
  EXPECT_EQ(none->get_stride(), (Dims{32, 1}));
  EXPECT_EQ(gather->get_dim(), (Dims{1, 12, 32}));
  EXPECT_EQ(scatter->get_dim(), (Dims{12, 32}));
}

TEST(OpsMisc, MoeGroupedMatmulRejects) {
  {
    Graph g;
    g.moe_grouped_matmul(input(g, "t", {12, 64}), input(g, "w", {4, 32, 32}), input(g, "off", {4}, DataType::INT32), NodeAttrs().set_name("m"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "moe_grouped_matmul \"m\"", {"hidden size 64", "K=32"});
  }
  {
    Graph g;
    g.moe_grouped_matmul(input(g, "t", {12, 64}), input(g, "w", {4, 64, 32}), input(g, "off", {3}, DataType::INT32), NodeAttrs().set_name("m"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "moe_grouped_matmul \"m\"", {"first_token_offset"});
  }
  {
    Graph g;
    g.moe_grouped_matmul(input(g, "t", {12, 64}), input(g, "w", {4, 64, 32}), input(g, "off", {4}, DataType::INT32),
                         NodeAttrs().set_name("m").set("mode", "GATHER"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "moe_grouped_matmul \"m\"", {"token_index"});
  }
  {
    Graph g;
    g.moe_grouped_matmul(input(g, "t", {12, 64}), input(g, "w", {4, 64, 32}), input(g, "off", {4}, DataType::INT32),
                         NodeAttrs().set_name("m").set("top_k", 0));
    expect_fail(g, ErrorCode::INVALID_VALUE, "moe_grouped_matmul \"m\"", {"top_k 0"});
  }
  {
    Graph g;
    g.moe_grouped_matmul(input(g, "t", {12, 64}), input(g, "w", {4, 64, 32}), input(g, "off", {4}, DataType::FLOAT),
                         NodeAttrs().set_name("m"));
    expect_fail(g, ErrorCode::GRAPH_NOT_SUPPORTED, "moe_grouped_matmul \"m\"", {"first_token_offset"});
  }
}

TEST(OpsMisc, MoeGroupedMatmulBackward) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [dt, dw] = g.moe_grouped_matmul_bwd(input(g, "dout", {12, 32}), input(g, "t", {12, 64}), input(g, "off", {4}, DataType::INT32),
                                           NodeAttrs().set_name("mb").input("weight", input(g, "w", {4, 64, 32})));
  EXPECT_VALID(g);
  EXPECT_EQ(dt->get_dim(), (Dims{12, 64}));
  EXPECT_EQ(dw->get_dim(), (Dims{4, 64, 32}));
  EXPECT_EQ(dw->get_stride(), (Dims{2048, 32, 1}));
  Graph bad;
  bad.moe_grouped_matmul_bwd(input(bad, "dout", {12, 16}), input(bad, "t", {12, 64}), input(bad, "off", {4}, DataType::INT32),
                             NodeAttrs().set_name("mb").input("weight", input(bad, "w", {4, 64, 32})));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "moe_grouped_matmul_bwd \"mb\"", {"input doutput"});
  // Without weight (cuDNN Frontend's form): dweight [E, K, N] from first_token_offset, token and doutput,
  // each expert's matrix column-major; dtoken is absent and cannot be a graph output.
  Graph nw;
  nw.set_io_data_type(DataType::FLOAT);
  auto [dt2, dw2] = nw.moe_grouped_matmul_bwd(input(nw, "dout", {12, 32}), input(nw, "t", {12, 64}),
                                              input(nw, "off", {4}, DataType::INT32), NodeAttrs().set_name("mb"));
  dw2->set_output(true);
  EXPECT_VALID(nw);
  EXPECT_EQ(dw2->get_dim(), (Dims{4, 64, 32}));
  EXPECT_EQ(dw2->get_stride(), (Dims{2048, 1, 64}));
  dt2->set_output(true);
  expect_fail(nw, ErrorCode::ATTRIBUTE_NOT_SET, "moe_grouped_matmul_bwd \"mb\"", {"dtoken", "no weight"});
}

TEST(OpsMisc, Rope) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT).set_intermediate_data_type(DataType::FLOAT);
  auto y = g.rope(input(g, "x", {2, 8, 16, 64}, DataType::BFLOAT16), input(g, "cos", {1, 1, 16, 32}), input(g, "sin", {1, 1, 16, 32}),
                  NodeAttrs().set_name("rope"));
  auto y2 = g.rope(input(g, "x2", {2, 8, 16, 64}, DataType::HALF), input(g, "cos2", {2, 1, 16, 16}), input(g, "sin2", {2, 1, 16, 16}),
                   NodeAttrs().set_name("rope2").set("rotary_dim", 32).set("interleaved", true));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 8, 16, 64}));
  EXPECT_EQ(y->get_stride(), (Dims{8192, 1024, 64, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(y2->get_data_type(), DataType::HALF);
}

TEST(OpsMisc, RopeRejects) {
  {
    Graph g;
    g.rope(input(g, "x", {2, 8, 16, 64}), input(g, "cos", {1, 1, 16, 64}), input(g, "sin", {1, 1, 16, 64}), NodeAttrs().set_name("rope"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "rope \"rope\"", {"cos [1,1,16,64]", "rotary_dim/2=32"});
  }
  {
    Graph g;
    g.rope(input(g, "x", {2, 8, 16, 64}), input(g, "cos", {1, 1, 16, 16}), input(g, "sin", {1, 1, 16, 16}),
           NodeAttrs().set_name("rope").set("rotary_dim", 33));
    expect_fail(g, ErrorCode::INVALID_VALUE, "rope \"rope\"", {"rotary_dim 33"});
  }
  {
    Graph g;
    g.rope(input(g, "x", {2, 8, 16, 64}), input(g, "cos", {1, 1, 16, 64}), input(g, "sin", {1, 1, 16, 64}),
           NodeAttrs().set_name("rope").set("rotary_dim", 128));
    expect_fail(g, ErrorCode::INVALID_VALUE, "rope \"rope\"", {"<= the head dim 64"});
  }
}

TEST(OpsMisc, RopeBackward) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto dx = g.rope_backward(input(g, "dy", {2, 16, 64}), input(g, "cos", {1, 16, 32}), input(g, "sin", {1, 16, 32}), NodeAttrs().set_name("rb"));
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{2, 16, 64}));
  Graph bad;
  bad.rope_backward(input(bad, "dy", {2, 16, 64}), input(bad, "cos", {1, 8, 32}), input(bad, "sin", {1, 16, 32}), NodeAttrs().set_name("rb"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "rope_backward \"rb\"", {"cos [1,8,32]", "S=16"});
}
