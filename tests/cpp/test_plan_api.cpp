// SPDX-License-Identifier: Apache-2.0
// The plan-level API: engines and knobs, notes and filters, serialize_plan / deserialize_plan with their
// checks, the kernel cache, per-graph targets and populate_cuda_graph, with the reference engine and a
// fake engine that has knobs, notes and a payload (no GPU needed).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "opendnn/opendnn.h"

using namespace opendnn;

namespace {

struct Log {
  int proposals = 0, builds = 0, restores = 0, populates = 0;
  bool last_update = false;
  int64_t last_tile = 0;
  std::string last_payload;
};

class KnobPlan final : public Plan {
 public:
  KnobPlan(int64_t tile, Log* log) : tile_(tile), log_(log) {}
  Status execute(void* const*, void*, void*) override { return {}; }
  int64_t workspace_size() const override { return 64; }
  Status serialize_payload(std::string& out) const override {
    out = "tile " + std::to_string(tile_);
    return {};
  }
  Status populate_cuda_graph(void* const*, void*, void*, bool update) override {
    ++log_->populates;
    log_->last_update = update;
    return {};
  }

 private:
  int64_t tile_;
  Log* log_;
};

// Two plans: "tiled" (knob tile_m, 32..128 by 32; TENSOR_CORE and RUNTIME_COMPILATION) and "plain"
// (no knobs, not deterministic). Serves the CPU, or CUDA sm_90 targets when `cuda` is set.
class KnobEngine final : public Engine {
 public:
  KnobEngine(Log* log, bool cuda = false) : log_(log), cuda_(cuda) {}
  std::string build = "fake build 1";
  std::string_view name() const override { return "knobbed"; }
  int64_t engine_id() const override { return kPythonEngineIdBase + 500; }
  bool serves(const Target& t) const override { return cuda_ ? t.kind == DeviceKind::CUDA : t.kind == DeviceKind::CPU; }
  std::string build_id() const override { return build; }
  Proposal propose_plans(const Graph&, const Target&) override {
    ++log_->proposals;
    Proposal p;
    PlanCandidate tiled;
    tiled.name = "tiled";
    tiled.local_index = 0;
    tiled.estimated_us = 0.01;
    tiled.knobs = {{"tile_m", 64}, {"engine_private", 7}};
    tiled.knob_ranges = {{"tile_m", 32, 128, 32, {}}};
    tiled.numerical_notes = {NumericalNote::TENSOR_CORE};
    tiled.behavior_notes = {BehaviorNote::RUNTIME_COMPILATION};
    PlanCandidate plain;
    plain.name = "plain";
    plain.local_index = 1;
    plain.estimated_us = 0.02;
    plain.deterministic = false;
    p.plans = {tiled, plain};
    return p;
  }
  Status build_plan(const Graph&, const Target&, const PlanCandidate& c, std::unique_ptr<Plan>& out) override {
    ++log_->builds;
    int64_t tile = 0;
    for (const auto& [k, v] : c.knobs)
      if (k == "tile_m") tile = v;
    log_->last_tile = tile;
    out = std::make_unique<KnobPlan>(tile, log_);
    return {};
  }
  Status restore_plan(const Graph& g, const Target& t, const PlanCandidate& c, std::string_view payload,
                      std::unique_ptr<Plan>& out) override {
    ++log_->restores;
    log_->last_payload = std::string(payload);
    return build_plan(g, t, c, out);
  }

 private:
  Log* log_;
  bool cuda_;
};

class PlanApi : public ::testing::Test {
 protected:
  void SetUp() override { unregister_engine(kPythonEngineIdBase + 500); }
  void TearDown() override { unregister_engine(kPythonEngineIdBase + 500); }
  std::shared_ptr<KnobEngine> add_engine(bool cuda = false) {
    auto e = std::make_shared<KnobEngine>(&log_, cuda);
    register_engine(e);
    return e;
  }
  // out = relu(x + y), uids 10, 20, 30.
  static void make(Graph& g, int64_t width = 4) {
    g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto x = g.tensor(TensorAttr().set_name("x").set_dim({2, width}).set_uid(10));
    auto y = g.tensor(TensorAttr().set_name("y").set_dim({2, width}).set_uid(20));
    auto out = g.relu(g.add(x, y));
    out->set_output(true).set_name("out").set_uid(30);
  }
  Log log_;
};

TEST_F(PlanApi, ReferenceEngineIsOneEngineWithoutKnobs) {
  Graph g;
  make(g);
  int64_t n = 0;
  ASSERT_TRUE(g.get_engine_count(n).is_good());
  EXPECT_EQ(n, 1);
  std::vector<KnobRange> knobs;
  ASSERT_TRUE(g.get_knobs_for_engine(0, knobs).is_good());
  EXPECT_TRUE(knobs.empty());
  ASSERT_TRUE(g.create_execution_plan(0, {}).is_good());
  EXPECT_EQ(g.get_execution_plan_count(), 1);
  Status s = g.create_execution_plan(0, {{KnobType::TILE_M, 64}});
  EXPECT_NE(s.message().find("has no knob TILE_M"), std::string::npos) << s.message();
  EXPECT_NE(g.get_knobs_for_engine(1, knobs).message().find("engine 1 is out of range"), std::string::npos);
}

TEST_F(PlanApi, KnobsAreListedAndSettableAndBadValuesAreErrors) {
  add_engine();
  Graph g;
  make(g);
  int64_t n = 0;
  ASSERT_TRUE(g.get_engine_count(n).is_good());
  ASSERT_EQ(n, 3);  // reference, tiled, plain
  std::vector<KnobRange> knobs;
  ASSERT_TRUE(g.get_knobs_for_engine(1, knobs).is_good());
  ASSERT_EQ(knobs.size(), 1u);  // engine_private names no knob type
  EXPECT_EQ(knobs[0].name, "TILE_M");
  EXPECT_EQ(knobs[0].min_value, 32);
  EXPECT_EQ(knobs[0].max_value, 128);
  EXPECT_EQ(knobs[0].stride, 32);
  Status bad = g.create_execution_plan(1, {{KnobType::TILE_M, 48}});
  EXPECT_EQ(bad.code(), ErrorCode::INVALID_VALUE);
  EXPECT_NE(bad.message().find("takes 32..128 by 32, not 48"), std::string::npos) << bad.message();
  bad = g.create_execution_plan(1, {{KnobType::TILE_M, 64}, {KnobType::TILE_M, 96}});
  EXPECT_NE(bad.message().find("given twice"), std::string::npos) << bad.message();
  EXPECT_EQ(g.get_execution_plan_count(), 0);
  ASSERT_TRUE(g.create_execution_plan(1, {{KnobType::TILE_M, 96}}).is_good());
  ASSERT_TRUE(g.create_execution_plan(1, {{KnobType::TILE_M, 96}}).is_good());  // listed once
  ASSERT_TRUE(g.create_execution_plan(1, {}).is_good());                         // the default: another plan
  EXPECT_EQ(g.get_execution_plan_count(), 2);
  ASSERT_TRUE(g.build_plans().is_good());
  EXPECT_EQ(log_.last_tile, 96);
}

TEST_F(PlanApi, NotesAreReportedAndFilterPlans) {
  add_engine();
  Graph g;
  make(g);
  ASSERT_TRUE(g.create_execution_plans({HeurMode::A}).is_good());
  ASSERT_EQ(g.get_execution_plan_count(), 3);  // tiled, plain, reference
  std::vector<BehaviorNote> bn;
  std::vector<NumericalNote> nn;
  ASSERT_TRUE(g.get_behavior_notes_for_plan_at_index(0, bn).is_good());
  EXPECT_EQ(bn, std::vector<BehaviorNote>{BehaviorNote::RUNTIME_COMPILATION});
  ASSERT_TRUE(g.get_numerical_notes_for_plan_at_index(1, nn).is_good());
  EXPECT_EQ(nn, std::vector<NumericalNote>{NumericalNote::NONDETERMINISTIC});
  ASSERT_TRUE(g.deselect_numeric_notes({NumericalNote::NONDETERMINISTIC}).is_good());
  PlanInfo info;
  ASSERT_TRUE(g.get_plan_info_at_index(1, info).is_good());
  EXPECT_TRUE(info.deselected);
  ASSERT_TRUE(g.select_behavior_notes({BehaviorNote::RUNTIME_COMPILATION}).is_good());
  ASSERT_TRUE(g.get_plan_info_at_index(2, info).is_good());
  EXPECT_TRUE(info.deselected);  // the reference plan has no notes
  ASSERT_TRUE(g.build_plans().is_good());
  EXPECT_EQ(g.selected_plan(), 0);
  ASSERT_TRUE(g.get_behavior_notes(bn).is_good());
  EXPECT_EQ(bn.size(), 1u);
  // Filters persist: planning again applies them.
  ASSERT_TRUE(g.create_execution_plans({HeurMode::A}).is_good());
  ASSERT_TRUE(g.get_plan_info_at_index(1, info).is_good());
  EXPECT_TRUE(info.deselected);
}

TEST_F(PlanApi, ReferencePlanRoundTripsAndExecutes) {
  Graph g;
  make(g);
  ASSERT_TRUE(g.build({HeurMode::FALLBACK}).is_good());
  std::string text;
  ASSERT_TRUE(g.serialize_plan(text).is_good());
  Graph h;
  ASSERT_TRUE(h.deserialize_plan(text).is_good());
  float x[8] = {1, -2, 3, -4, 5, -6, 7, -8}, y[8] = {1, 1, 1, 1, 1, 1, 1, 1}, out[8] = {};
  std::vector<char> ws(size_t(h.get_workspace_size()) + 1);
  Status s = h.execute(std::unordered_map<int64_t, void*>{{10, x}, {20, y}, {30, out}}, ws.data());
  ASSERT_TRUE(s.is_good()) << s.message();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], std::max(0.f, x[i] + y[i]));
  EXPECT_EQ(h.get_workspace_size(), g.get_workspace_size());
}

TEST_F(PlanApi, DeserializeRestoresWithoutPlanningAndChecksTheBuild) {
  auto engine = add_engine();
  Graph g;
  make(g);
  ASSERT_TRUE(g.create_execution_plan(1, {{KnobType::TILE_M, 128}}).is_good());
  ASSERT_TRUE(g.build_plans().is_good());
  std::string text;
  ASSERT_TRUE(g.serialize_plan(text).is_good());
  const int proposals = log_.proposals;
  Graph h;
  ASSERT_TRUE(h.deserialize_plan(text).is_good());
  EXPECT_EQ(log_.proposals, proposals);
  EXPECT_EQ(log_.restores, 1);
  EXPECT_EQ(log_.last_payload, "tile 128");
  EXPECT_EQ(log_.last_tile, 128);
  EXPECT_EQ(h.get_workspace_size(), 64);
  std::vector<BehaviorNote> bn;
  ASSERT_TRUE(h.get_behavior_notes(bn).is_good());
  EXPECT_EQ(bn.size(), 1u);

  engine->build = "fake build 2";
  Graph k;
  Status s = k.deserialize_plan(text);
  EXPECT_NE(s.message().find("\"fake build 1\"; this process has \"fake build 2\""), std::string::npos) << s.message();
  unregister_engine(engine->engine_id());
  s = k.deserialize_plan(text);
  EXPECT_NE(s.message().find("is not registered here"), std::string::npos) << s.message();
  EXPECT_EQ(k.get_execution_plan_count(), 0);
}

TEST_F(PlanApi, APlanForAnotherGraphOrTargetIsRefused) {
  add_engine(/*cuda=*/true);
  Graph g;
  make(g);
  g.set_target(Target{DeviceKind::CUDA, 0, 90, 132});  // deviceless: no GPU needed to plan for it
  ASSERT_TRUE(g.build({HeurMode::A}).is_good());
  std::string text;
  ASSERT_TRUE(g.serialize_plan(text).is_good());
  Graph cpu;
  cpu.set_target(Target{});
  Status s = cpu.deserialize_plan(text);
  EXPECT_NE(s.message().find("built for a cuda target but this graph plans for cpu"), std::string::npos) << s.message();
  Graph other_sm;
  other_sm.set_target(Target{DeviceKind::CUDA, 0, 100, 148});
  s = other_sm.deserialize_plan(text);
  EXPECT_NE(s.message().find("built for sm_90 but this device is sm_100"), std::string::npos) << s.message();
  Graph same;
  same.set_target(Target{DeviceKind::CUDA, 0, 90, 132});
  ASSERT_TRUE(same.deserialize_plan(text).is_good());
  // The plan record applied to a graph of another shape.
  auto doc = nlohmann::json::parse(text);
  Graph wider;
  make(wider, 8);
  wider.set_target(Target{DeviceKind::CUDA, 0, 90, 132});
  std::string wider_graph;
  ASSERT_TRUE(wider.serialize(wider_graph).is_good());
  doc["graph"] = nlohmann::json::parse(wider_graph);
  s = Graph().deserialize_plan(doc.dump());
  EXPECT_NE(s.message().find("built for another graph"), std::string::npos) << s.message();
}

TEST_F(PlanApi, KernelCacheReusesPlansAndRoundTrips) {
  add_engine();
  auto cache = std::make_shared<KernelCache>();
  Graph g;
  make(g);
  g.set_kernel_cache(cache);
  ASSERT_TRUE(g.build({HeurMode::A}).is_good());
  EXPECT_EQ(cache->size(), 1u);
  const int proposals = log_.proposals;
  Graph g2;
  make(g2);
  g2.set_kernel_cache(cache);
  ASSERT_TRUE(g2.build({HeurMode::A}).is_good());
  EXPECT_EQ(log_.proposals, proposals);
  std::string text;
  ASSERT_TRUE(cache->serialize(text).is_good());
  auto fresh = std::make_shared<KernelCache>();
  ASSERT_TRUE(fresh->deserialize(text).is_good());
  Status s = fresh->deserialize(text);
  EXPECT_NE(s.message().find("already holds 1 plans"), std::string::npos) << s.message();
  Graph g3;
  make(g3);
  g3.set_kernel_cache(fresh);
  ASSERT_TRUE(g3.build({HeurMode::A}).is_good());
  EXPECT_EQ(log_.proposals, proposals);
  Graph g4;  // another structure misses
  make(g4, 8);
  g4.set_kernel_cache(fresh);
  ASSERT_TRUE(g4.build({HeurMode::A}).is_good());
  EXPECT_EQ(log_.proposals, proposals + 1);
}

TEST_F(PlanApi, PopulateCudaGraphGoesToThePlan) {
  add_engine();
  Graph g;
  make(g);
  ASSERT_TRUE(g.build({HeurMode::A}).is_good());
  float a[8], b[8], c[8];
  std::unordered_map<int64_t, void*> pack{{10, a}, {20, b}, {30, c}};
  char ws[64];
  int fake_graph = 0;
  ASSERT_TRUE(g.populate_cuda_graph(pack, ws, &fake_graph).is_good());
  ASSERT_TRUE(g.populate_cuda_graph(pack, ws, &fake_graph, /*update=*/true).is_good());
  EXPECT_EQ(log_.populates, 2);
  EXPECT_TRUE(log_.last_update);
  EXPECT_NE(g.populate_cuda_graph(pack, nullptr, &fake_graph).message().find("workspace is null"), std::string::npos);
  Graph r;
  make(r);
  ASSERT_TRUE(r.build({HeurMode::FALLBACK}).is_good());
  std::vector<char> rws(size_t(r.get_workspace_size()) + 1);
  Status s = r.populate_cuda_graph(pack, rws.data(), &fake_graph);
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(s.message().find("not supported"), std::string::npos);
}

TEST(PlanRecords, MalformedDocumentsAreErrorsAndLeaveTheGraph) {
  Graph g;
  for (const char* doc : {"{", "[]", R"({"opendnn_serialized_plan": 1, "graph": 5, "plan": 3})",
                          R"({"opendnn_serialized_plan": 2, "graph": {}, "plan": {}})",
                          R"({"opendnn_serialized_plan": 1, "graph": {"version": "2.0", "tensors": [], "nodes": []},
                              "plan": {"opendnn_plan": "one"}})",
                          R"({"opendnn_serialized_plan": 1, "graph": {"version": "2.0", "tensors": [], "nodes": []},
                              "plan": {"opendnn_plan": 1, "library": 7}})"}) {
    Status s = g.deserialize_plan(doc);
    EXPECT_TRUE(s.is_bad()) << doc;
    EXPECT_TRUE(g.nodes().empty());
  }
  KernelCache c;
  EXPECT_TRUE(c.deserialize(R"({"opendnn_kernel_cache": 1, "library": "opendnn 0.0.0", "entries": {}})").is_bad());
  EXPECT_TRUE(c.deserialize(R"({"opendnn_kernel_cache": 1, "library": "x", "entries": {"k": 3}})").is_bad());
  EXPECT_EQ(c.size(), 0u);
}

TEST(KnobTypes, NamesRoundTrip) {
  EXPECT_EQ(knob_type_from_name("swizzle"), KnobType::SWIZZLE);
  EXPECT_EQ(knob_type_from_name("knob24"), KnobType::KERNEL_CFG);
  EXPECT_EQ(knob_type_from_name("knob9999"), KnobType::NOT_SET);
  EXPECT_EQ(knob_type_from_name("engine"), KnobType::NOT_SET);
  EXPECT_EQ(to_string(KnobType::WARP_SPEC_CFG), "WARP_SPEC_CFG");
  EXPECT_EQ(to_string(NumericalNote::STRICT_NAN_PROP), "STRICT_NAN_PROP");
  EXPECT_EQ(to_string(BehaviorNote::CUBLASLT_DEPENDENCY), "CUBLASLT_DEPENDENCY");
  KnobRange r{"x", 4, 16, 4, {4, 8, 16}};
  EXPECT_TRUE(r.takes(8));
  EXPECT_FALSE(r.takes(12));
}

}  // namespace
