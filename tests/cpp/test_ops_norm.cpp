// SPDX-License-Identifier: Apache-2.0
// Inference and validation rules of the normalisations (batchnorm family, layer/rms/instance/ada norm).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "opendnn/graph.h"
#include "support/rule_test.h"

using namespace opendnn;
using namespace opendnn::test;

namespace {
TensorPtr eps(Graph& g) { return g.tensor(Scalar::of_float(1e-5f)); }
}  // namespace

TEST(OpsNorm, BatchnormTrainingWithRunningStats) {
  Graph g;
  g.set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::HALF);
  auto x = input(g, "x", {4, 8, 5, 5}, DataType::HALF);
  auto sc = input(g, "scale", {1, 8, 1, 1}), b = input(g, "bias", {1, 8, 1, 1});
  auto rm = input(g, "rm", {1, 8, 1, 1}), rv = input(g, "rv", {1, 8, 1, 1});
  auto [y, mean, iv, nrm, nrv] = g.batchnorm(x, sc, b, NodeAttrs().set_name("bn").input("epsilon", eps(g))
                                                     .input("momentum", g.tensor(Scalar::of_float(0.1f)))
                                                     .input("prev_running_mean", rm).input("prev_running_var", rv));
  y->set_output(true);
  nrm->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{4, 8, 5, 5}));
  EXPECT_EQ(y->get_stride(), (Dims{200, 25, 5, 1}));
  EXPECT_EQ(y->get_data_type(), DataType::HALF);
  for (const auto& t : {mean, iv, nrm, nrv}) {
    EXPECT_EQ(t->get_dim(), (Dims{1, 8, 1, 1}));
    EXPECT_EQ(t->get_data_type(), DataType::FLOAT);
  }
}

TEST(OpsNorm, BatchnormRejects) {
  {
    Graph g;
    g.batchnorm(input(g, "x", {4, 8, 5, 5}), input(g, "s", {1, 4, 1, 1}), input(g, "b", {1, 8, 1, 1}),
                NodeAttrs().set_name("bn").input("epsilon", eps(g)));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "batchnorm \"bn\"", {"input scale has dims [1,4,1,1]", "[1,8,1,1]"});
  }
  {
    Graph g;
    g.batchnorm(input(g, "x", {4, 8, 5, 5}), input(g, "s", {1, 8, 1, 1}), input(g, "b", {1, 8, 1, 1}),
                NodeAttrs().set_name("bn").input("epsilon", eps(g)).input("prev_running_mean", input(g, "rm", {1, 8, 1, 1})));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "batchnorm \"bn\"", {"prev_running_var", "momentum"});
  }
  {
    Graph g;
    g.batchnorm(input(g, "x", {4, 8, 5, 5}), input(g, "s", {1, 8, 1, 1}), input(g, "b", {1, 8, 1, 1}),
                NodeAttrs().set_name("bn").input("epsilon", input(g, "e", {2})));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "batchnorm \"bn\"", {"epsilon must hold one value"});
  }
  {
    Graph g;
    g.batchnorm(input(g, "x", {4, 8, 5, 5}), input(g, "s", {1, 8, 1, 1}), input(g, "b", {1, 8, 1, 1}), NodeAttrs().set_name("bn"));
    expect_fail(g, ErrorCode::ATTRIBUTE_NOT_SET, "batchnorm \"bn\"", {"epsilon"});
  }
  {
    Graph g;
    auto outs = g.batchnorm(input(g, "x", {4, 8, 5, 5}), input(g, "s", {1, 8, 1, 1}), input(g, "b", {1, 8, 1, 1}),
                            NodeAttrs().set_name("bn").input("epsilon", eps(g)));
    outs[3]->set_output(true);
    expect_fail(g, ErrorCode::INVALID_VALUE, "batchnorm \"bn\"", {"next_running_mean"});
  }
}

TEST(OpsNorm, BatchnormInference) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto pc = [&](const char* n) { return input(g, n, {1, 3, 1, 1}); };
  auto y = g.batchnorm_inference(input(g, "x", {2, 3, 4, 4}), pc("m"), pc("iv"), pc("s"), pc("b"), NodeAttrs().set_name("bni"));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 3, 4, 4}));
  Graph bad;
  bad.batchnorm_inference(input(bad, "x", {2, 3, 4, 4}), input(bad, "m", {3}), input(bad, "iv", {1, 3, 1, 1}),
                          input(bad, "s", {1, 3, 1, 1}), input(bad, "b", {1, 3, 1, 1}), NodeAttrs().set_name("bni"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "batchnorm_inference \"bni\"", {"input mean"});
}

TEST(OpsNorm, BatchnormBackward) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto pc = [&](const char* n) { return input(g, n, {1, 3, 1, 1}); };
  auto [dx, ds, db] = g.batchnorm_backward(input(g, "dy", {2, 3, 4, 4}), input(g, "x", {2, 3, 4, 4}), pc("s"), pc("m"), pc("iv"),
                                           NodeAttrs().set_name("dbn"));
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{2, 3, 4, 4}));
  EXPECT_EQ(ds->get_dim(), (Dims{1, 3, 1, 1}));
  EXPECT_EQ(db->get_stride(), (Dims{3, 1, 1, 1}));
  Graph bad;
  bad.batchnorm_backward(input(bad, "dy", {2, 3, 4, 5}), input(bad, "x", {2, 3, 4, 4}), input(bad, "s", {1, 3, 1, 1}),
                         input(bad, "m", {1, 3, 1, 1}), input(bad, "iv", {1, 3, 1, 1}), NodeAttrs().set_name("dbn"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "batchnorm_backward \"dbn\"", {"input DY", "like X"});
}

TEST(OpsNorm, BnFinalize) {
  Graph g;
  g.set_io_data_type(DataType::HALF);
  auto pc = [&](const char* n) { return input(g, n, {1, 16, 1, 1}); };
  auto outs = g.bn_finalize(pc("sum"), pc("sq"), pc("s"), pc("b"), eps(g), g.tensor(Scalar::of_int64(512)), NodeAttrs().set_name("fin"));
  EXPECT_VALID(g);
  for (const auto& t : outs) {
    EXPECT_EQ(t->get_dim(), (Dims{1, 16, 1, 1}));
    EXPECT_EQ(t->get_data_type(), DataType::FLOAT);
  }
  Graph bad;
  auto pcb = [&](const char* n) { return input(bad, n, {1, 16, 1, 1}); };
  bad.bn_finalize(pcb("sum"), pcb("sq"), pcb("s"), pcb("b"), eps(bad), bad.tensor(Scalar::of_float(512.f)), NodeAttrs().set_name("fin"));
  expect_fail(bad, ErrorCode::GRAPH_NOT_SUPPORTED, "bn_finalize \"fin\"", {"accum_count", "INT64"});
  Graph bad2;
  bad2.bn_finalize(input(bad2, "sum", {2, 16, 1, 1}), input(bad2, "sq", {2, 16, 1, 1}), input(bad2, "s", {2, 16, 1, 1}),
                   input(bad2, "b", {2, 16, 1, 1}), eps(bad2), bad2.tensor(Scalar::of_int64(512)), NodeAttrs().set_name("fin"));
  expect_fail(bad2, ErrorCode::SHAPE_DEDUCTION_FAILED, "bn_finalize \"fin\"", {"input sum"});
}

TEST(OpsNorm, DbnWeight) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto pc = [&](const char* n) { return input(g, n, {1, 3, 1, 1}); };
  auto outs = g.dbn_weight(input(g, "dy", {2, 3, 4, 4}), input(g, "x", {2, 3, 4, 4}), pc("m"), pc("iv"), pc("s"), NodeAttrs().set_name("dw"));
  EXPECT_VALID(g);
  for (const auto& t : outs) EXPECT_EQ(t->get_dim(), (Dims{1, 3, 1, 1}));
  EXPECT_EQ(outs[2]->get_data_type(), DataType::FLOAT);
  Graph bad;
  bad.dbn_weight(input(bad, "dy", {2, 3, 4, 4}), input(bad, "x", {2, 3, 4, 4}), input(bad, "m", {1, 3, 1, 1}),
                 input(bad, "iv", {1, 3, 1, 1}), input(bad, "s", {1, 4, 1, 1}), NodeAttrs().set_name("dw"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "dbn_weight \"dw\"", {"input scale"});
}

TEST(OpsNorm, LayernormStatsPerBatch) {
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::BFLOAT16);
  auto x = input(g, "x", {4, 16, 64}, DataType::BFLOAT16);
  auto [y, mean, iv] = g.layernorm(x, input(g, "s", {1, 16, 64}), input(g, "b", {1, 16, 64}), eps(g), NodeAttrs().set_name("ln"));
  // scale [1, 1, H]: normalise over H only, statistics per (b, s)
  auto [y2, mean2, iv2] = g.layernorm(x, input(g, "s2", {1, 1, 64}), input(g, "b2", {1, 1, 64}), eps(g), NodeAttrs().set_name("ln2"));
  y->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{4, 16, 64}));
  EXPECT_EQ(y->get_data_type(), DataType::BFLOAT16);
  EXPECT_EQ(mean->get_dim(), (Dims{4, 1, 1}));
  EXPECT_EQ(iv->get_stride(), (Dims{1, 1, 1}));
  EXPECT_EQ(mean->get_data_type(), DataType::FLOAT);
  EXPECT_EQ(iv2->get_dim(), (Dims{4, 16, 1}));
  EXPECT_EQ(iv2->get_stride(), (Dims{16, 1, 1}));
}

TEST(OpsNorm, LayernormRejects) {
  {
    Graph g;
    g.layernorm(input(g, "x", {4, 16, 64}), input(g, "s", {4, 16, 64}), input(g, "b", {4, 16, 64}), eps(g), NodeAttrs().set_name("ln"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "layernorm \"ln\"", {"scale [4,16,64] does not fit X [4,16,64]"});
  }
  {
    Graph g;
    g.layernorm(input(g, "x", {4, 64}), input(g, "s", {1, 64}), input(g, "b", {1, 32}), eps(g), NodeAttrs().set_name("ln"));
    expect_fail(g, ErrorCode::SHAPE_DEDUCTION_FAILED, "layernorm \"ln\"", {"input bias"});
  }
  {
    Graph g;
    auto outs = g.layernorm(input(g, "x", {4, 64}), input(g, "s", {1, 64}), input(g, "b", {1, 64}), eps(g),
                            NodeAttrs().set_name("ln").set("forward_phase", "INFERENCE"));
    outs[1]->set_output(true);
    expect_fail(g, ErrorCode::INVALID_VALUE, "layernorm \"ln\"", {"output mean", "INFERENCE"});
  }
}

TEST(OpsNorm, LayernormInferenceStillGivesStatsDims) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [y, mean, iv] = g.layernorm(input(g, "x", {4, 64}), input(g, "s", {1, 64}), input(g, "b", {1, 64}), eps(g),
                                   NodeAttrs().set_name("ln").set("forward_phase", "INFERENCE"));
  EXPECT_VALID(g);
  EXPECT_EQ(mean->get_dim(), (Dims{4, 1}));
  EXPECT_TRUE(mean->get_is_virtual());
}

TEST(OpsNorm, LayernormBackward) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [dx, ds, db] = g.layernorm_backward(input(g, "dy", {4, 16, 64}), input(g, "x", {4, 16, 64}), input(g, "s", {1, 16, 64}),
                                           input(g, "m", {4, 1, 1}), input(g, "iv", {4, 1, 1}), NodeAttrs().set_name("lnb"));
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{4, 16, 64}));
  EXPECT_EQ(ds->get_dim(), (Dims{1, 16, 64}));
  EXPECT_EQ(db->get_dim(), (Dims{1, 16, 64}));
  Graph bad;
  bad.layernorm_backward(input(bad, "dy", {4, 16, 64}), input(bad, "x", {4, 16, 64}), input(bad, "s", {1, 16, 64}),
                         input(bad, "m", {4, 16, 1}), input(bad, "iv", {4, 1, 1}), NodeAttrs().set_name("lnb"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "layernorm_backward \"lnb\"", {"input mean has dims [4,16,1]", "[4,1,1]"});
}

TEST(OpsNorm, Rmsnorm) {
  Graph g;
  g.set_io_data_type(DataType::HALF);
  auto [y, iv] = g.rmsnorm(input(g, "x", {8, 128}, DataType::HALF), input(g, "s", {1, 128}), eps(g),
                           NodeAttrs().set_name("rms").input("bias", input(g, "b", {1, 128})));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{8, 128}));
  EXPECT_EQ(iv->get_dim(), (Dims{8, 1}));
  EXPECT_EQ(iv->get_data_type(), DataType::FLOAT);
  Graph bad;
  bad.rmsnorm(input(bad, "x", {8, 128}), input(bad, "s", {1, 128}), input(bad, "e", {1, 2}), NodeAttrs().set_name("rms"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "rmsnorm \"rms\"", {"epsilon"});
}

TEST(OpsNorm, RmsnormBackwardDbiasOnlyWithHasDbias) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [dx, ds, db] = g.rmsnorm_backward(input(g, "dy", {8, 128}), input(g, "x", {8, 128}), input(g, "s", {1, 128}),
                                         input(g, "iv", {8, 1}), NodeAttrs().set_name("rmsb").set("has_dbias", true));
  db->set_output(true);
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{8, 128}));
  EXPECT_EQ(ds->get_dim(), (Dims{1, 128}));
  EXPECT_EQ(db->get_dim(), (Dims{1, 128}));
  Graph bad;
  auto outs = bad.rmsnorm_backward(input(bad, "dy", {8, 128}), input(bad, "x", {8, 128}), input(bad, "s", {1, 128}),
                                   input(bad, "iv", {8, 1}), NodeAttrs().set_name("rmsb"));
  outs[2]->set_output(true);
  expect_fail(bad, ErrorCode::INVALID_VALUE, "rmsnorm_backward \"rmsb\"", {"dbias", "has_dbias"});
  Graph bad2;
  bad2.rmsnorm_backward(input(bad2, "dy", {8, 128}), input(bad2, "x", {8, 128}), input(bad2, "s", {1, 128}),
                        input(bad2, "iv", {1, 1}), NodeAttrs().set_name("rmsb"));
  expect_fail(bad2, ErrorCode::SHAPE_DEDUCTION_FAILED, "rmsnorm_backward \"rmsb\"", {"inv_variance"});
}

TEST(OpsNorm, Instancenorm) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [y, mean, iv] = g.instancenorm(input(g, "x", {2, 3, 4, 5}), input(g, "s", {1, 3, 1, 1}), input(g, "b", {1, 3, 1, 1}), eps(g),
                                      NodeAttrs().set_name("in"));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 3, 4, 5}));
  EXPECT_EQ(mean->get_dim(), (Dims{2, 3, 1, 1}));
  EXPECT_EQ(mean->get_stride(), (Dims{3, 1, 1, 1}));
  EXPECT_EQ(iv->get_data_type(), DataType::FLOAT);
  Graph bad;
  bad.instancenorm(input(bad, "x", {2, 3}), input(bad, "s", {1, 3}), input(bad, "b", {1, 3}), eps(bad), NodeAttrs().set_name("in"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "instancenorm \"in\"", {"at least 3 dims"});
}

TEST(OpsNorm, InstancenormBackward) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [dx, ds, db] = g.instancenorm_backward(input(g, "dy", {2, 3, 4, 5}), input(g, "x", {2, 3, 4, 5}), input(g, "s", {1, 3, 1, 1}),
                                              input(g, "m", {2, 3, 1, 1}), input(g, "iv", {2, 3, 1, 1}), NodeAttrs().set_name("inb"));
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{2, 3, 4, 5}));
  EXPECT_EQ(ds->get_dim(), (Dims{1, 3, 1, 1}));
  Graph bad;
  bad.instancenorm_backward(input(bad, "dy", {2, 3, 4, 5}), input(bad, "x", {2, 3, 4, 5}), input(bad, "s", {1, 3, 1, 1}),
                            input(bad, "m", {1, 3, 1, 1}), input(bad, "iv", {2, 3, 1, 1}), NodeAttrs().set_name("inb"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "instancenorm_backward \"inb\"", {"input mean"});
}

TEST(OpsNorm, Adalayernorm) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [y, mean, iv] = g.adalayernorm(input(g, "x", {2, 10, 32}), input(g, "s", {2, 1, 32}), eps(g),
                                      NodeAttrs().set_name("ada").input("bias", input(g, "b", {2, 1, 32})));
  EXPECT_VALID(g);
  EXPECT_EQ(y->get_dim(), (Dims{2, 10, 32}));
  EXPECT_EQ(mean->get_dim(), (Dims{2, 10, 1}));
  EXPECT_EQ(iv->get_dim(), (Dims{2, 10, 1}));
  Graph bad;
  bad.adalayernorm(input(bad, "x", {2, 10, 32}), input(bad, "s", {1, 10, 32}), eps(bad),
                   NodeAttrs().set_name("ada").input("bias", input(bad, "b", {2, 1, 32})));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "adalayernorm \"ada\"", {"input scale", "[2,1,32]", "per batch element"});
  // bias is optional (cuDNN Frontend's adalayernorm(bias=None))
  Graph nobias;
  nobias.set_io_data_type(DataType::FLOAT);
  auto [y2, m2, iv2] = nobias.adalayernorm(input(nobias, "x", {2, 10, 32}), input(nobias, "s", {2, 1, 32}), eps(nobias));
  EXPECT_VALID(nobias);
  EXPECT_EQ(y2->get_dim(), (Dims{2, 10, 32}));
}

TEST(OpsNorm, AdalayernormBackward) {
  Graph g;
  g.set_io_data_type(DataType::FLOAT);
  auto [dx, ds, db] = g.adalayernorm_backward(input(g, "dy", {2, 10, 32}), input(g, "x", {2, 10, 32}), input(g, "s", {2, 1, 32}),
                                              input(g, "m", {2, 10, 1}), input(g, "iv", {2, 10, 1}), NodeAttrs().set_name("adab"));
  EXPECT_VALID(g);
  EXPECT_EQ(dx->get_dim(), (Dims{2, 10, 32}));
  EXPECT_EQ(ds->get_dim(), (Dims{2, 1, 32}));
  EXPECT_EQ(db->get_dim(), (Dims{2, 1, 32}));
  Graph bad;
  bad.adalayernorm_backward(input(bad, "dy", {2, 10, 32}), input(bad, "x", {2, 10, 32}), input(bad, "s", {2, 1, 32}),
                            input(bad, "m", {2, 1, 1}), input(bad, "iv", {2, 10, 1}), NodeAttrs().set_name("adab"));
  expect_fail(bad, ErrorCode::SHAPE_DEDUCTION_FAILED, "adalayernorm_backward \"adab\"", {"input mean"});
}
