// SPDX-License-Identifier: Apache-2.0
// Graph JSON v2: every op round-trips, uids, rejections with their JSON path, key().
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "opendnn/graph.h"
#include "serialize/file_read.h"

using namespace opendnn;
using nlohmann::json;

namespace {

std::vector<std::string> members(const char* choices) {
  std::vector<std::string> out;
  std::string cur;
  for (const char* p = choices; p && *p; ++p) {
    if (*p == '|') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += *p;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// A value of the attribute's type that differs from its default.
AttrValue non_default(const AttrSpec& a, int salt) {
  switch (a.type) {
    case AttrType::BOOL: return !(std::holds_alternative<bool>(a.default_value) && std::get<bool>(a.default_value));
    case AttrType::INT: return int64_t(7 + salt);
    case AttrType::FLOAT: return 0.25 + salt;
    case AttrType::ENUM: return members(a.choices).back();
    case AttrType::STRING: return std::string("s") + std::to_string(salt);
    case AttrType::INT_LIST: return std::vector<int64_t>{1, 2, int64_t(salt)};
    case AttrType::FLOAT_LIST: return std::vector<double>{0.5, -1.5, double(salt)};
  }
  return {};
}

// One node of every op in the catalogue, every input port connected (optional ones on every other
// op), every attribute set to a non-default value. Structure only: it is not meant to validate.
void build_every_op(Graph& g) {
  g.set_name("every_op").set_io_data_type(DataType::HALF).set_intermediate_data_type(DataType::FLOAT)
      .set_compute_data_type(DataType::FLOAT).set_sm_count(132).set_sm_version(90);
  int salt = 0;
  for (const OpSpec& spec : all_op_specs()) {
    ++salt;
    NodeAttrs attrs;
    attrs.set_name(std::string("n_") + spec.method).set_compute_data_type(salt % 2 ? DataType::FLOAT : DataType::NOT_SET);
    for (const AttrSpec& a : spec.def->attrs) attrs.set(a.name, non_default(a, salt));
    auto make = [&](const std::string& port) {
      return g.tensor(TensorAttr()
                          .set_name(std::string(spec.method) + "." + port)
                          .set_dim({2, 3, int64_t(salt)})
                          .set_stride({3 * int64_t(salt), int64_t(salt), 1})
                          .set_data_type(DataType::HALF));
    };
    std::vector<TensorPtr> positional;
    if (spec.variadic()) {
      for (int i = 0; i < 3; ++i) positional.push_back(make(std::to_string(i)));
    } else {
      for (size_t i = 0; i < spec.def->inputs.size(); ++i) {
        const PortSpec& p = spec.def->inputs[i];
        if (p.required || salt % 2 == 0) attrs.input(p.name, make(p.name));
      }
    }
    auto outs = g.add_node(spec.kind, positional, attrs);
    ASSERT_EQ(outs.size(), spec.def->outputs.size());
    outs[0]->set_output(true);
  }
}

std::string must_serialize(const Graph& g, bool structure = false) {
  std::string s;
  Status st = g.serialize(s, structure);
  EXPECT_TRUE(st.is_good()) << st.to_string();
  return s;
}

// A small valid document the rejection tests mutate.
json base_doc() {
  return json::parse(R"({
    "version": "2.0",
    "context": {"name": "t", "io_data_type": "HALF", "intermediate_data_type": "FLOAT", "compute_data_type": "FLOAT"},
    "tensors": [
      {"uid": 1, "name": "a", "dim": [4, 8], "stride": [8, 1], "data_type": "HALF"},
      {"uid": 2, "name": "b", "dim": [8, 16], "stride": [16, 1], "data_type": "HALF"},
      {"uid": 3, "name": "c", "is_virtual": true},
      {"uid": 4, "name": "y", "is_virtual": false},
      {"uid": 5, "name": "offs", "dim": [5, 1, 1, 1], "data_type": "INT32"}
    ],
    "nodes": [
      {"tag": "MATMUL", "name": "mm", "inputs": {"A": 1, "B": 2}, "outputs": {"C": 3}},
      {"tag": "POINTWISE", "name": "act", "attributes": {"mode": "RELU_FWD"}, "inputs": {"IN_0": 3}, "outputs": {"OUT_0": 4}}
    ]
  })");
}

Status load(Graph& g, const json& doc) { return g.deserialize(doc.dump()); }

void expect_rejected(const json& doc, ErrorCode code, const std::string& needle) {
  Graph g;
  Status s = load(g, doc);
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << "message: " << s.message() << "\nexpected: " << needle;
}

}  // namespace

TEST(GraphJson, BaseDocumentIsValid) {
  Graph g;
  ASSERT_TRUE(load(g, base_doc()).is_good());
  Status s = g.validate();
  ASSERT_TRUE(s.is_good()) << s.to_string();
  auto y = g.find_tensor(4);
  ASSERT_TRUE(y);
  EXPECT_EQ(y->get_dim(), (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(y->get_data_type(), DataType::HALF);
  EXPECT_EQ(g.find_tensor(3)->get_data_type(), DataType::FLOAT);
}

TEST(GraphJson, EveryOpRoundTripsExactly) {
  Graph g;
  build_every_op(g);
  // Extras: a pass-by-value scalar of another type, a ragged offset, a reordering, user uids.
  auto scalar = g.tensor(Scalar::of_float(0.1f));
  scalar->set_name("eps");
  auto half_scalar = g.tensor(TensorAttr().set_data_type(DataType::HALF).set_dim({1}).set_stride({1}));
  half_scalar->set_value(Scalar::of_double(1.0 / 3.0));
  auto seed = g.tensor(Scalar::of_int64(std::numeric_limits<int64_t>::min()));
  auto inf = g.tensor(Scalar::of_float(-std::numeric_limits<float>::infinity()));
  auto offs = g.tensor(TensorAttr().set_name("offs").set_dim({5, 1, 1, 1}).set_data_type(DataType::INT32).set_uid(1000));
  auto q = g.tensor(TensorAttr().set_name("q").set_dim({4, 2, 8, 64}).set_data_type(DataType::BFLOAT16)
                        .set_ragged_offset(offs).set_reordering_type(TensorReordering::F16x16).set_uid(7));
  auto k = g.tensor(TensorAttr().set_name("k").set_dim({4, 2, 8, 64}).set_data_type(DataType::BFLOAT16).set_ragged_offset(offs));
  g.matmul(q, k, NodeAttrs().set("padding", 1.5));
  (void)seed; (void)inf;

  std::string s1 = must_serialize(g);
  Graph g2;
  Status st = g2.deserialize(s1);
  ASSERT_TRUE(st.is_good()) << st.to_string();
  std::string s2 = must_serialize(g2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(must_serialize(g, true), must_serialize(g2, true));
  EXPECT_EQ(g.key(), g2.key());

  // Every tag is present, and every node came back with the same attributes and ports.
  json doc = json::parse(s1);
  std::set<std::string> tags;
  for (const auto& n : doc["nodes"]) tags.insert(n["tag"].get<std::string>());
  for (const OpSpec& spec : all_op_specs()) EXPECT_TRUE(tags.count(spec.tag)) << spec.tag;
  ASSERT_EQ(g.nodes().size(), g2.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& a = *g.nodes()[i];
    const Node& b = *g2.nodes()[i];
    EXPECT_EQ(a.kind(), b.kind());
    EXPECT_EQ(a.name(), b.name());
    EXPECT_EQ(a.compute_data_type(), b.compute_data_type());
    EXPECT_EQ(a.attrs(), b.attrs()) << a.name();
    ASSERT_EQ(a.inputs().size(), b.inputs().size());
    for (size_t p = 0; p < a.inputs().size(); ++p) {
      ASSERT_EQ(bool(a.inputs()[p]), bool(b.inputs()[p])) << a.name() << " port " << p;
      if (a.inputs()[p]) {
        EXPECT_EQ(a.inputs()[p]->get_dim(), b.inputs()[p]->get_dim());
        EXPECT_EQ(a.inputs()[p]->get_name(), b.inputs()[p]->get_name());
      }
    }
  }
  // Ragged offsets are serialized once and shared again after reading.
  auto q2 = g2.find_tensor(7);
  ASSERT_TRUE(q2 && q2->get_ragged_offset());
  EXPECT_EQ(q2->get_ragged_offset()->get_uid(), 1000);
  EXPECT_EQ(q2->get_reordering_type(), TensorReordering::F16x16);
  int offs_entries = 0;
  for (const auto& t : doc["tensors"]) offs_entries += t["uid"] == 1000;
  EXPECT_EQ(offs_entries, 1);
  // Scalars keep their type and value exactly.
  bool saw_third = false, saw_min = false, saw_inf = false;
  for (const auto& t : g2.tensors()) {
    const Scalar& v = t->get_value();
    if (v.type == DataType::DOUBLE && v.f == 1.0 / 3.0 && t->get_data_type() == DataType::HALF) saw_third = true;
    if (v.type == DataType::INT64 && v.i == std::numeric_limits<int64_t>::min()) saw_min = true;
    if (v.type == DataType::FLOAT && std::isinf(v.f) && v.f < 0) saw_inf = true;
  }
  EXPECT_TRUE(saw_third && saw_min && saw_inf);

  // The structure document is a valid document too, and reads back to the same structure.
  Graph g3;
  ASSERT_TRUE(g3.deserialize(must_serialize(g, true)).is_good());
  EXPECT_EQ(must_serialize(g3, true), must_serialize(g, true));
  EXPECT_EQ(g3.key(), g.key());
}

TEST(GraphJson, NonFiniteAndUnsetAttributesRoundTrip) {
  Graph g;
  auto x = g.tensor(TensorAttr().set_dim({2}).set_data_type(DataType::FLOAT));
  g.relu(x, NodeAttrs().set("relu_upper_clip", std::numeric_limits<double>::infinity())
                .set("relu_lower_clip", std::numeric_limits<double>::quiet_NaN()));
  auto y = g.matmul(g.tensor(TensorAttr().set_dim({2, 2})), g.tensor(TensorAttr().set_dim({2, 2})),
                    NodeAttrs().set("padding", AttrValue{}));  // explicitly unset although it has a default
  (void)y;
  std::string s1 = must_serialize(g);
  Graph g2;
  ASSERT_TRUE(g2.deserialize(s1).is_good());
  EXPECT_EQ(s1, must_serialize(g2));
  EXPECT_TRUE(std::isinf(g2.nodes()[0]->attr_float("relu_upper_clip")));
  EXPECT_TRUE(std::isnan(g2.nodes()[0]->attr_float("relu_lower_clip")));
  EXPECT_FALSE(g2.nodes()[1]->has("padding"));
  // A FLOAT attribute given as an int is written as a float, and the round trip is still exact.
  Graph g3;
  g3.matmul(g3.tensor(TensorAttr().set_dim({2, 2})), g3.tensor(TensorAttr().set_dim({2, 2})), NodeAttrs().set("padding", 3));
  std::string t1 = must_serialize(g3);
  Graph g4;
  ASSERT_TRUE(g4.deserialize(t1).is_good());
  EXPECT_EQ(t1, must_serialize(g4));
}

TEST(GraphJson, ConcatenatePortsAreNumbered) {
  Graph g;
  std::vector<TensorPtr> ins;
  for (int i = 0; i < 12; ++i) ins.push_back(g.tensor(TensorAttr().set_dim({1, 2}).set_data_type(DataType::FLOAT)));
  g.concatenate(ins, NodeAttrs().set("axis", 0));
  std::string s = must_serialize(g);
  json doc = json::parse(s);
  const auto& in = doc["nodes"][0]["inputs"];
  EXPECT_EQ(in.size(), 12u);
  EXPECT_TRUE(in.contains("0") && in.contains("11"));
  Graph g2;
  ASSERT_TRUE(g2.deserialize(s).is_good());
  EXPECT_EQ(g2.nodes()[0]->inputs().size(), 12u);
  EXPECT_EQ(s, must_serialize(g2));

  doc["nodes"][0]["inputs"].erase("5");
  expect_rejected(doc, ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "nodes[0].inputs.5: missing");
  doc = json::parse(s);
  doc["nodes"][0]["inputs"]["01"] = 1;
  expect_rejected(doc, ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "nodes[0].inputs.01: unknown input port");
}

TEST(GraphJson, UidAssignmentKeepsUserUids) {
  Graph g;
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({2, 2}).set_uid(5));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({2, 2}));
  auto c = g.tensor(TensorAttr().set_name("c").set_dim({2, 2}).set_uid(1));
  auto d = g.add(a, b, NodeAttrs().set_name("add"));
  auto e = g.mul(d, c, NodeAttrs().set_name("mul"));
  e->set_output(true);
  g.set_io_data_type(DataType::FLOAT);

  std::string s1 = must_serialize(g);
  // serialize() is const: nothing got a uid.
  EXPECT_FALSE(b->has_uid());
  EXPECT_FALSE(d->has_uid());
  json doc = json::parse(s1);
  std::map<std::string, int64_t> uid;
  for (const auto& t : doc["tensors"]) uid[t["name"].get<std::string>()] = t["uid"].get<int64_t>();
  EXPECT_EQ(uid["a"], 5);
  EXPECT_EQ(uid["c"], 1);
  EXPECT_EQ(uid["b"], 2);  // the first free uid, in the order tensors were made
  // The same uids validate() assigns, so a document written before validate stays true after.
  ASSERT_TRUE(g.validate().is_good());
  EXPECT_EQ(b->get_uid(), 2);
  EXPECT_EQ(d->get_uid(), uid["add::OUT_0"]);
  EXPECT_EQ(e->get_uid(), uid["mul::OUT_0"]);
  // Tensors are listed by ascending uid.
  int64_t prev = std::numeric_limits<int64_t>::min();
  for (const auto& t : doc["tensors"]) {
    EXPECT_LT(prev, t["uid"].get<int64_t>());
    prev = t["uid"].get<int64_t>();
  }
  // Duplicate user uids cannot be written.
  Graph dup;
  dup.tensor(TensorAttr().set_name("x").set_uid(3));
  dup.tensor(TensorAttr().set_name("y").set_uid(3));
  std::string out;
  Status s = dup.serialize(out);
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VALUE);
  EXPECT_NE(s.message().find("share uid 3"), std::string::npos) << s.message();
  EXPECT_EQ(dup.serialize(), "");
}

TEST(GraphJson, MissingOutputsGetFreshTensors) {
  json doc = base_doc();
  doc["nodes"][0]["outputs"] = json::object();
  doc["nodes"][1]["inputs"]["IN_0"] = 1;
  Graph g;
  ASSERT_TRUE(load(g, doc).is_good());
  ASSERT_TRUE(g.nodes()[0]->out("C"));
  EXPECT_TRUE(g.nodes()[0]->out("C")->get_is_virtual());
  std::string s1 = must_serialize(g);
  Graph g2;
  ASSERT_TRUE(g2.deserialize(s1).is_good());
  EXPECT_EQ(s1, must_serialize(g2));
}

TEST(GraphJson, Rejections) {
  const auto F = ErrorCode::UNSUPPORTED_GRAPH_FORMAT;
  const auto V = ErrorCode::INVALID_VALUE;
  {
    Graph g;
    Status s = g.deserialize("{\"version\": \"2.0\", \"tensors\": [");
    EXPECT_EQ(s.code(), F);
    EXPECT_NE(s.message().find("malformed JSON"), std::string::npos) << s.message();
    EXPECT_EQ(g.deserialize("").code(), F);
    EXPECT_EQ(g.deserialize("[1, 2]").code(), F);
    EXPECT_EQ(g.deserialize("{\"version\": \"2.0\", \"version\": \"2.0\"}").code(), F);
  }
  json d;
  d = base_doc(); d.erase("version");
  expect_rejected(d, F, "version: missing");
  d = base_doc(); d["version"] = "1.0";
  expect_rejected(d, F, "version: unsupported version \"1.0\"");
  d = base_doc(); d["version"] = 2;
  expect_rejected(d, F, "version: expected the string \"2.0\", found an integer");
  d = base_doc(); d["extra"] = 1;
  expect_rejected(d, F, "extra: unknown field");
  d = base_doc(); d["tensors"][1]["uid"] = 1;
  expect_rejected(d, F, "tensors[1].uid: uid 1 is already used by tensors[0]");
  d = base_doc(); d["tensors"][1].erase("uid");
  expect_rejected(d, F, "tensors[1].uid: missing");
  d = base_doc(); d["tensors"][0]["uid"] = "1";
  expect_rejected(d, F, "tensors[0].uid: expected an integer, found a string");
  d = base_doc(); d["tensors"][0]["uid"] = 18446744073709551615ull;
  expect_rejected(d, F, "tensors[0].uid: integer does not fit in int64");
  d = base_doc(); d["nodes"][0]["inputs"]["B"] = 17;
  expect_rejected(d, F, "nodes[0].inputs.B: no tensor with uid 17");
  d = base_doc(); d["nodes"][1]["outputs"]["OUT_0"] = 99;
  expect_rejected(d, F, "nodes[1].outputs.OUT_0: no tensor with uid 99");
  d = base_doc(); d["tensors"][0]["ragged_offset_uid"] = 42;
  expect_rejected(d, F, "tensors[0].ragged_offset_uid: no tensor with uid 42");
  d = base_doc(); d["tensors"][0]["ragged_offset_uid"] = 5; d["tensors"][4]["ragged_offset_uid"] = 1;
  expect_rejected(d, F, "ragged offsets form a cycle");
  d = base_doc(); d["tensors"][0]["ragged_offset_uid"] = 1;
  expect_rejected(d, F, "tensors[0].ragged_offset_uid: ragged offsets form a cycle");
  d = base_doc(); d["tensors"][0]["dim"] = "4x8";
  expect_rejected(d, F, "tensors[0].dim: expected an array of integers, found a string");
  d = base_doc(); d["tensors"][0]["dim"][1] = 8.5;
  expect_rejected(d, F, "tensors[0].dim[1]: expected an integer, found a number");
  d = base_doc(); d["tensors"][0]["dim"] = std::vector<int>(17, 1);
  expect_rejected(d, F, "tensors[0].dim: has 17 elements, at most 16 allowed");
  d = base_doc(); d["tensors"][0]["is_virtual"] = 0;
  expect_rejected(d, F, "tensors[0].is_virtual: expected a bool, found an integer");
  d = base_doc(); d["tensors"][0]["data_type"] = "HALFISH";
  expect_rejected(d, V, "tensors[0].data_type: unknown data type \"HALFISH\"");
  d = base_doc(); d["tensors"][0]["dims"] = {1};
  expect_rejected(d, F, "tensors[0].dims: unknown field");
  d = base_doc(); d["tensors"][0]["reordering_type"] = "SIDEWAYS";
  expect_rejected(d, V, "tensors[0].reordering_type: unknown reordering");
  d = base_doc(); d["tensors"][4]["value"] = "x";
  expect_rejected(d, F, "tensors[4].value: expected an integer, found a string");
  d = base_doc(); d["context"]["io_data_type"] = 3;
  expect_rejected(d, F, "context.io_data_type: expected a string, found an integer");
  d = base_doc(); d["context"]["sm"] = 90;
  expect_rejected(d, F, "context.sm: unknown field");
  d = base_doc(); d["nodes"][0]["tag"] = "MATMUL_XL";
  expect_rejected(d, F, "nodes[0].tag: unknown op tag \"MATMUL_XL\"");
  d = base_doc(); d["nodes"][0].erase("tag");
  expect_rejected(d, F, "nodes[0].tag: missing");
  d = base_doc(); d["nodes"][0]["attributes"] = {{"pading", 1.0}};
  expect_rejected(d, F, "nodes[0].attributes.pading: unknown attribute of MATMUL");
  d = base_doc(); d["nodes"][0]["attributes"] = {{"padding", "zero"}};
  expect_rejected(d, F, "nodes[0].attributes.padding: expected a number");
  d = base_doc(); d["nodes"][1]["attributes"]["mode"] = "RELU";
  expect_rejected(d, V, "nodes[1].attributes.mode: \"RELU\" is not one of");
  d = base_doc(); d["nodes"][1]["attributes"]["mode"] = true;
  expect_rejected(d, F, "nodes[1].attributes.mode: expected a string, found a bool");
  d = base_doc(); d["nodes"][0]["inputs"]["Q"] = 1;
  expect_rejected(d, F, "nodes[0].inputs.Q: unknown input port of MATMUL");
  d = base_doc(); d["nodes"][0]["outputs"]["D"] = 3;
  expect_rejected(d, F, "nodes[0].outputs.D: unknown output port of MATMUL");
  d = base_doc(); d["nodes"][0]["inputs"] = {1, 2};
  expect_rejected(d, F, "nodes[0].inputs: expected an object, found an array");
  d = base_doc(); d["nodes"] = json::object();
  expect_rejected(d, F, "nodes: expected an array, found an object");
}

TEST(GraphJson, FailureLeavesTheGraphUntouched) {
  Graph g;
  ASSERT_TRUE(load(g, base_doc()).is_good());
  std::string before = must_serialize(g);
  json bad = base_doc();
  bad["nodes"][1]["inputs"]["IN_0"] = 77;
  EXPECT_TRUE(load(g, bad).is_bad());
  EXPECT_TRUE(g.deserialize("{").is_bad());
  EXPECT_EQ(must_serialize(g), before);
}

TEST(GraphJson, DeepAndHugeDocumentsAreRejectedWithoutCrashing) {
  Graph g;
  std::string deep(100000, '[');
  Status s = g.deserialize(deep);
  EXPECT_EQ(s.code(), ErrorCode::UNSUPPORTED_GRAPH_FORMAT);
  EXPECT_NE(s.message().find("deeper than 64"), std::string::npos) << s.message();
  std::string deep_obj;
  for (int i = 0; i < 100000; ++i) deep_obj += "{\"a\":";
  EXPECT_EQ(g.deserialize(deep_obj).code(), ErrorCode::UNSUPPORTED_GRAPH_FORMAT);
  // Nesting within the limit but inside a field is a type error, not a crash.
  json d = base_doc();
  json nest = json::array();
  for (int i = 0; i < 40; ++i) nest = json::array({nest});
  d["tensors"][0]["dim"] = nest;
  expect_rejected(d, ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "tensors[0].dim[0]: expected an integer, found an array");
  // Very long keys are shortened in messages.
  d = base_doc();
  d["nodes"][0]["attributes"] = {{std::string(10000, 'k'), 1}};
  Graph g2;
  Status s2 = load(g2, d);
  EXPECT_EQ(s2.code(), ErrorCode::UNSUPPORTED_GRAPH_FORMAT);
  EXPECT_LT(s2.message().size(), 400u) << s2.message().size();
}

TEST(GraphJson, KeyIsStableAndStructural) {
  auto build = [](int64_t m, double pad, const std::string& name, bool uids) {
    Graph g;
    g.set_name(name).set_io_data_type(DataType::HALF).set_compute_data_type(DataType::FLOAT);
    auto a = g.tensor(TensorAttr().set_name(name + "a").set_dim({m, 32}).set_data_type(DataType::HALF));
    auto b = g.tensor(TensorAttr().set_name(name + "b").set_dim({32, 16}).set_data_type(DataType::HALF));
    if (uids) {
      a->set_uid(100);
      b->set_uid(200);
    }
    auto eps = g.tensor(Scalar::of_float(name == "x" ? 1e-5f : 1e-6f));
    auto c = g.matmul(a, b, NodeAttrs().set("padding", pad));
    g.mul(c, eps)->set_output(true);
    return g;
  };
  Graph g1 = build(64, 0.0, "x", false), g2 = build(64, 0.0, "x", false);
  EXPECT_EQ(g1.key(), g2.key());
  EXPECT_EQ(g1.key(), g1.key());
  EXPECT_NE(g1.key(), build(65, 0.0, "x", false).key());    // a dim
  EXPECT_NE(g1.key(), build(64, 1.0, "x", false).key());    // an attribute
  EXPECT_EQ(g1.key(), build(64, 0.0, "y", false).key());    // names and pass-by-value values are not structure
  EXPECT_EQ(g1.key(), build(64, 0.0, "x", true).key());     // nor are uids
  // The key survives a round trip and does not depend on the process: a golden value.
  Graph g3;
  ASSERT_TRUE(g3.deserialize(g1.serialize()).is_good());
  EXPECT_EQ(g3.key(), g1.key());
  // Update only when the structure format changes on purpose (it invalidates on-disk plan caches).
  EXPECT_EQ(g1.key(), 0x8fb41ff7a3745b02ull) << std::hex << "0x" << g1.key();
}

// Reading a document from a file or stream: bounded, and every failure names the file and the OS reason.
TEST(GraphJsonFile, ReadsAreBoundedAndNameTheReason) {
  std::string text;
  // An endless stream stops at the cap instead of growing without limit.
  Status s = serialize::read_file("/dev/zero", 1 << 20, false, "Graph JSON document", text);
  ASSERT_TRUE(s.is_bad());
  EXPECT_NE(s.message().find("/dev/zero: Graph JSON document larger than 1 MiB"), std::string::npos) << s.message();
  EXPECT_TRUE(text.empty());
  // A directory is a directory, not malformed JSON.
  s = serialize::read_file("/tmp", 1 << 20, false, "Graph JSON document", text);
  EXPECT_NE(s.message().find("cannot read /tmp: Is a directory"), std::string::npos) << s.message();
  s = serialize::read_file("/no/such/graph.json", 1 << 20, false, "Graph JSON document", text);
  EXPECT_NE(s.message().find("cannot read /no/such/graph.json: No such file or directory"), std::string::npos)
      << s.message();
  // A regular file over the cap is refused before it is read; one within it is read whole.
  std::string path = ::testing::TempDir() + "opendnn-json-file-test.json";
  { std::ofstream(path) << std::string(3000, ' ') << "{}"; }
  s = serialize::read_file(path, 1000, false, "Graph JSON document", text);
  EXPECT_NE(s.message().find("larger than 1000 bytes"), std::string::npos) << s.message();
  ASSERT_TRUE(serialize::read_file(path, 4000, false, "Graph JSON document", text).is_good());
  EXPECT_EQ(text.size(), 3002u);
  std::remove(path.c_str());
}

TEST(GraphJsonFile, SpecialFilesAreRefusedWithoutBlockingWhenOnlyRegularFilesAreWanted) {
  std::string fifo = ::testing::TempDir() + "opendnn-json-fifo-" + std::to_string(::getpid());
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string text;
  // No writer ever opens the FIFO: a blocking open would hang here.
  Status s = serialize::read_file(fifo, 1 << 20, /*regular_only=*/true, "plan cache file", text);
  EXPECT_NE(s.message().find("a FIFO, not a regular file"), std::string::npos) << s.message();
  s = serialize::read_file("/dev/null", 1 << 20, /*regular_only=*/true, "plan cache file", text);
  EXPECT_NE(s.message().find("a character device"), std::string::npos) << s.message();
  ::unlink(fifo.c_str());
}
