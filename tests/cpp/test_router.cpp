// SPDX-License-Identifier: Apache-2.0
// The router and the plan lifecycle, proven with fake engines (no GPU, no kernels needed).
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "opendnn/opendnn.h"
#include "plan/attention_cost.h"
#include "plan/plan_cache.h"

using namespace opendnn;

namespace {

struct FakePlanSpec {
  std::string name;
  int64_t local;
  double estimate_us;
  int64_t workspace = 0;
  int sleep_us = 0;
  bool fail_build = false;
};

struct Log {
  std::atomic<int> executions{0};
  std::vector<void*> last_slots;
  std::string last_plan;
  std::vector<int64_t> slots_seen_in_propose;  // variant_slot_of(x, y, out) while proposing
};

class FakePlan final : public Plan {
 public:
  FakePlan(FakePlanSpec s, size_t nslots, Log* log) : spec_(std::move(s)), nslots_(nslots), log_(log) {}
  Status execute(void* const* slots, void*, void*) override {
    if (spec_.sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(spec_.sleep_us));
    log_->last_slots.assign(slots, slots + nslots_);
    log_->last_plan = spec_.name;
    ++log_->executions;
    return {};
  }
  int64_t workspace_size() const override { return spec_.workspace; }

 private:
  FakePlanSpec spec_;
  size_t nslots_;
  Log* log_;
};

class FakeEngine final : public Engine {
 public:
  FakeEngine(std::string name, int64_t id, std::vector<FakePlanSpec> plans, Log* log, bool fallback = false,
             std::vector<std::string> declines = {})
      : name_(std::move(name)), id_(id), plans_(std::move(plans)), log_(log), fallback_(fallback),
        declines_(std::move(declines)) {}
  std::string_view name() const override { return name_; }
  int64_t engine_id() const override { return id_; }
  bool serves(const Target& t) const override { return t.kind == DeviceKind::CPU; }
  bool is_fallback() const override { return fallback_; }
  Proposal propose_plans(const Graph& g, const Target&) override {
    Proposal p;
    log_->slots_seen_in_propose = {g.variant_slot_of(10), g.variant_slot_of(20), g.variant_slot_of(30)};
    if (!declines_.empty()) {
      p.declines = declines_;
      return p;
    }
    for (const auto& s : plans_) {
      PlanCandidate c;
      c.name = s.name;
      c.local_index = s.local;
      c.estimated_us = s.estimate_us;
      c.workspace_bytes = s.workspace;
      p.plans.push_back(c);
    }
    return p;
  }
  Status build_plan(const Graph& g, const Target&, const PlanCandidate& c, std::unique_ptr<Plan>& out) override {
    for (const auto& s : plans_)
      if (s.local == c.local_index) {
        if (s.fail_build) return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "fake build failure"};
        out = std::make_unique<FakePlan>(s, g.variant_uids().size(), log_);
        return {};
      }
    return {ErrorCode::INVALID_VALUE, "no such plan"};
  }

 private:
  std::string name_;
  int64_t id_;
  std::vector<FakePlanSpec> plans_;
  Log* log_;
  bool fallback_;
  std::vector<std::string> declines_;
};

// Replaces the registry's engines for one test and restores them afterwards.
class Router : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = registered_engines();
    for (const auto& e : saved_) unregister_engine(e->engine_id());
    cache_dir_ = std::filesystem::temp_directory_path() /
                 ("opendnn-router-test-" + std::to_string(::getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(cache_dir_);
    ::setenv("OPENDNN_CACHE_DIR", cache_dir_.c_str(), 1);
  }
  void TearDown() override {
    for (const auto& e : registered_engines()) unregister_engine(e->engine_id());
    for (const auto& e : saved_) register_engine(e);
    std::filesystem::remove_all(cache_dir_);
  }
  void add(std::string name, int64_t id, std::vector<FakePlanSpec> plans, bool fallback = false,
           std::vector<std::string> declines = {}) {
    register_engine(std::make_shared<FakeEngine>(std::move(name), id, std::move(plans), &log_, fallback,
                                                 std::move(declines)));
  }
  // x + y -> relu -> out; `width` varies the structure.
  struct G {
    Graph g;
    TensorPtr x, y, out;
  };
  static std::unique_ptr<G> make_graph(int64_t width = 4) {
    auto r = std::make_unique<G>();
    r->g.set_io_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    r->x = r->g.tensor(TensorAttr().set_name("x").set_dim({2, width}).set_uid(10));
    r->y = r->g.tensor(TensorAttr().set_name("y").set_dim({2, width}).set_uid(20));
    auto s = r->g.add(r->x, r->y, NodeAttrs().set_name("sum"));
    r->out = r->g.relu(s, NodeAttrs().set_name("act"));
    r->out->set_output(true).set_name("out").set_uid(30);
    return r;
  }
  std::vector<std::string> plan_names(const Graph& g) {
    std::vector<std::string> v;
    for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
      std::string n;
      EXPECT_TRUE(g.get_plan_name_at_index(i, n).is_good());
      v.push_back(n);
    }
    return v;
  }

  std::vector<std::shared_ptr<Engine>> saved_;
  std::filesystem::path cache_dir_;
  Log log_;
};

using Names = std::vector<std::string>;

}  // namespace

TEST_F(Router, ReferenceEngineIsRegisteredByDefault) {
  bool found = false;
  for (const auto& e : saved_)
    if (e->engine_id() == kReferenceEngineId) {
      found = true;
      EXPECT_EQ(e->name(), "reference");
      EXPECT_TRUE(e->is_fallback());
    }
  EXPECT_TRUE(found);
}

// Engines match tensors to execute()'s slots while they propose (the cuda families decline a graph
// whose inputs have no slot), so the slots must exist before the first proposal.
TEST_F(Router, VariantSlotsAreKnownWhileEnginesPropose) {
  add("alpha", kCppEngineIdBase + 500, {{"a0", 0, 30.0}});
  auto t = make_graph();
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(log_.slots_seen_in_propose, (std::vector<int64_t>{0, 1, 2}));
}

TEST_F(Router, RanksByEstimateAcrossEngines) {
  add("alpha", kCppEngineIdBase + 500, {{"a0", 0, 30.0}, {"a1", 1, 10.0}});
  add("beta", kCppEngineIdBase + 501, {{"b0", 0, 20.0}, {"b1", 7, 5.0}});
  auto t = make_graph();
  ASSERT_TRUE(t->g.validate().is_good());
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"beta:b1", "alpha:a1", "beta:b0", "alpha:a0"}));
  std::string e;
  ASSERT_TRUE(t->g.get_engine_name_at_index(1, e).is_good());
  EXPECT_EQ(e, "alpha");
  PlanInfo info;
  ASSERT_TRUE(t->g.get_plan_info_at_index(0, info).is_good());
  EXPECT_EQ(info.engine_id, kCppEngineIdBase + 501);
  EXPECT_EQ(info.local_index, 7);
  EXPECT_EQ(t->g.find_plan_index(kCppEngineIdBase + 500, 0), 3);
  EXPECT_EQ(t->g.find_plan_index(kCppEngineIdBase + 500, 5), -1);
  std::string bad;
  EXPECT_EQ(t->g.get_plan_name_at_index(4, bad).code(), ErrorCode::INVALID_VALUE);

  // Mode B: grouped by engine (best engine first), each engine's own order kept.
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::B}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"beta:b0", "beta:b1", "alpha:a0", "alpha:a1"}));
}

TEST_F(Router, IndicesStayStableAcrossDeselect) {
  add("alpha", kCppEngineIdBase + 500, {{"a0", 0, 10.0, 1 << 20}, {"a1", 1, 30.0, 0}});
  add("beta", kCppEngineIdBase + 501, {{"b0", 0, 20.0, 256}});
  auto t = make_graph();
  ASSERT_TRUE(t->g.build({HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"alpha:a0", "beta:b0", "alpha:a1"}));
  EXPECT_EQ(t->g.selected_plan(), 0);
  EXPECT_EQ(t->g.get_workspace_size(), 1 << 20);

  ASSERT_TRUE(t->g.deselect_workspace_greater_than(1000).is_good());
  EXPECT_EQ(t->g.get_execution_plan_count(), 3);  // marked, not removed
  EXPECT_EQ(plan_names(t->g), (Names{"alpha:a0", "beta:b0", "alpha:a1"}));
  EXPECT_EQ(t->g.selected_plan(), -1);  // the selected plan was deselected
  PlanInfo info;
  ASSERT_TRUE(t->g.get_plan_info_at_index(0, info).is_good());
  EXPECT_TRUE(info.deselected);
  EXPECT_FALSE(info.built);
  EXPECT_FALSE(t->g.select_plan(0).is_good());
  EXPECT_FALSE(t->g.build_plan_at_index(0).is_good());

  ASSERT_TRUE(t->g.build_plans().is_good());
  EXPECT_EQ(t->g.selected_plan(), 1);
  EXPECT_EQ(t->g.get_workspace_size(), 256);

  ASSERT_TRUE(t->g.select_plan(2).is_good());  // builds it
  std::vector<float> x(8), y(8), o(8);
  ASSERT_TRUE(t->g.execute({{10, x.data()}, {20, y.data()}, {30, o.data()}}, nullptr).is_good());
  EXPECT_EQ(log_.last_plan, "a1");
  alignas(64) char ws[256];
  ASSERT_TRUE(t->g.execute_plan_at_index({{10, x.data()}, {20, y.data()}, {30, o.data()}}, ws, 1).is_good());
  EXPECT_EQ(log_.last_plan, "b0");

  ASSERT_TRUE(t->g.deselect_engines({"beta"}).is_good());
  EXPECT_EQ(t->g.selected_plan(), 2);
  EXPECT_EQ(plan_names(t->g), (Names{"alpha:a0", "beta:b0", "alpha:a1"}));
  Status s = t->g.execute_plan_at_index({{10, x.data()}, {20, y.data()}, {30, o.data()}}, ws, 1);
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_EXECUTION_FAILED);
  EXPECT_NE(s.message().find("deselected"), std::string::npos) << s.message();

  ASSERT_TRUE(t->g.deselect_engines({"alpha"}).is_good());
  s = t->g.check_support();
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(s.message().find("deselected"), std::string::npos) << s.message();
}

TEST_F(Router, CheckSupportListsEveryDecline) {
  add("alpha", kCppEngineIdBase + 500, {}, false, {"add \"sum\": alpha needs FP8 inputs"});
  add("beta", kCppEngineIdBase + 501, {}, false, {"relu \"act\": beta has no relu", "beta: rank 2 unsupported"});
  auto t = make_graph();
  ASSERT_TRUE(t->g.validate().is_good());
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(t->g.get_execution_plan_count(), 0);
  Status s = t->g.check_support();
  ASSERT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(s.message().find("alpha: add \"sum\": alpha needs FP8 inputs"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("beta: relu \"act\": beta has no relu"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 2 unsupported"), std::string::npos) << s.message();
  EXPECT_EQ(t->g.build({HeurMode::A}).code(), ErrorCode::GRAPH_NOT_SUPPORTED);
}

TEST_F(Router, FallbackAndOpenSourceModesFilter) {
  add("backend", kBackendEngineIdBase + 1, {{"be0", 0, 1.0}});
  add("ours", kCppEngineIdBase + 500, {{"o0", 0, 5.0}});
  add("safe", kCppEngineIdBase + 501, {{"s0", 0, 100.0}}, /*fallback=*/true);
  auto t = make_graph();
  ASSERT_TRUE(t->g.validate().is_good());
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"backend:be0", "ours:o0", "safe:s0"}));
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::FALLBACK}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"safe:s0"}));
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::OPENSOURCE}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"ours:o0", "safe:s0"}));
  // Modes concatenate: FALLBACK's plans first, then what A adds.
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::FALLBACK, HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"safe:s0", "backend:be0", "ours:o0"}));
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::A, HeurMode::FALLBACK}).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"backend:be0", "ours:o0", "safe:s0"}));

  // Only a backend engine: OPENSOURCE has nothing, and says why.
  unregister_engine(kCppEngineIdBase + 500);
  unregister_engine(kCppEngineIdBase + 501);
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::OPENSOURCE}).is_good());
  Status s = t->g.check_support();
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(s.message().find("backend: excluded by heuristic mode(s) OPENSOURCE"), std::string::npos)
      << s.message();
}

TEST_F(Router, BuildPoliciesAndFailures) {
  add("alpha", kCppEngineIdBase + 500,
      {{"bad", 0, 1.0, 0, 0, /*fail_build=*/true}, {"good", 1, 2.0}, {"other", 2, 3.0}});
  auto t = make_graph();
  ASSERT_TRUE(t->g.build({HeurMode::A}).is_good());  // HEURISTICS_CHOICE: the first that builds
  EXPECT_EQ(t->g.selected_plan(), 1);
  PlanInfo info;
  ASSERT_TRUE(t->g.get_plan_info_at_index(0, info).is_good());
  EXPECT_FALSE(info.built);
  EXPECT_NE(info.build_error.find("fake build failure"), std::string::npos);
  ASSERT_TRUE(t->g.get_plan_info_at_index(2, info).is_good());
  EXPECT_FALSE(info.built);

  ASSERT_TRUE(t->g.build_plans(BuildPlanPolicy::ALL).is_good());
  ASSERT_TRUE(t->g.get_plan_info_at_index(2, info).is_good());
  EXPECT_TRUE(info.built);
  EXPECT_EQ(t->g.selected_plan(), 1);
  EXPECT_EQ(t->g.build_plan_at_index(0).code(), ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED);
}

TEST_F(Router, ExecuteBeforeBuildIsAClearError) {
  add("alpha", kCppEngineIdBase + 500, {{"a0", 0, 1.0}});
  auto t = make_graph();
  std::vector<float> x(8), y(8), o(8);
  Status s = t->g.execute({{10, x.data()}, {20, y.data()}, {30, o.data()}}, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_EXECUTION_FAILED);
  EXPECT_NE(s.message().find("build"), std::string::npos) << s.message();
  void* slots[3] = {x.data(), y.data(), o.data()};
  EXPECT_FALSE(t->g.execute(slots, nullptr).is_good());
  ASSERT_TRUE(t->g.validate().is_good());
  ASSERT_TRUE(t->g.create_execution_plans({HeurMode::A}).is_good());
  s = t->g.execute(slots, nullptr);  // planned, nothing built
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_EXECUTION_FAILED) << s.message();
  EXPECT_EQ(log_.executions.load(), 0);
  ASSERT_TRUE(t->g.build_plans().is_good());
  ASSERT_TRUE(t->g.execute(slots, nullptr).is_good());
  EXPECT_EQ(log_.executions.load(), 1);

  // Changing the graph after planning invalidates the plans until the next build.
  auto z = t->g.tensor(TensorAttr().set_name("z").set_dim({2, 4}));
  (void)t->g.mul(t->out, z);
  s = t->g.execute(slots, nullptr);
  EXPECT_EQ(s.code(), ErrorCode::GRAPH_EXECUTION_FAILED);
  EXPECT_NE(s.message().find("changed"), std::string::npos) << s.message();
}

TEST_F(Router, VariantPackErrors) {
  add("alpha", kCppEngineIdBase + 500, {{"a0", 0, 1.0, 64}});
  auto t = make_graph();
  // A constant: no slot.
  auto eps = t->g.tensor(TensorAttr().set_name("eps").set_dim({1, 1}).set_stride({1, 1}).set_value(Scalar::of_float(0.5f)).set_uid(40));
  (void)t->g.mul(t->out, eps, NodeAttrs().set_name("scaled"));
  Status built = t->g.build({HeurMode::A});
  ASSERT_TRUE(built.is_good()) << built.to_string();
  EXPECT_EQ(t->g.variant_uids(), (std::vector<int64_t>{10, 20, 30}));

  std::vector<float> x(8), y(8), o(8);
  alignas(64) char ws[64];
  auto expect_pack_error = [&](const std::unordered_map<int64_t, void*>& pack, const std::string& needle) {
    Status s = t->g.execute(pack, ws);
    EXPECT_EQ(s.code(), ErrorCode::INVALID_VARIANT_PACK) << needle;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
  };
  expect_pack_error({{10, x.data()}, {30, o.data()}}, "no pointer for uid 20 (\"y\")");
  expect_pack_error({{10, x.data()}, {20, y.data()}, {30, o.data()}, {99, o.data()}}, "uid 99 is not a tensor");
  expect_pack_error({{10, x.data()}, {20, y.data()}, {30, o.data()}, {40, o.data()}}, "pass-by-value constant");
  int64_t sum_uid = t->g.nodes()[0]->outputs()[0]->get_uid();
  expect_pack_error({{10, x.data()}, {20, y.data()}, {30, o.data()}, {sum_uid, o.data()}}, "is virtual");
  expect_pack_error({{10, x.data()}, {20, nullptr}, {30, o.data()}}, "null pointer for uid 20 (\"y\")");
  EXPECT_EQ(log_.executions.load(), 0);  // nothing ran

  // By TensorPtr, and the hot path.
  std::unordered_map<TensorPtr, void*> by_tensor{{t->x, x.data()}, {t->y, y.data()}, {t->out, o.data()}};
  ASSERT_TRUE(t->g.execute(by_tensor, ws).is_good());
  EXPECT_EQ(log_.last_slots, (std::vector<void*>{x.data(), y.data(), o.data()}));
  by_tensor.erase(t->y);
  Status s = t->g.execute(by_tensor, ws);
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VARIANT_PACK);
  by_tensor[nullptr] = y.data();
  EXPECT_EQ(t->g.execute(by_tensor, ws).code(), ErrorCode::INVALID_VARIANT_PACK);

  void* slots[3] = {x.data(), nullptr, o.data()};
  s = t->g.execute(slots, ws);
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VARIANT_PACK);
  EXPECT_NE(s.message().find("uid 20"), std::string::npos) << s.message();
  slots[1] = y.data();
  s = t->g.execute(slots, nullptr);  // the plan needs 64 bytes of workspace
  EXPECT_EQ(s.code(), ErrorCode::INVALID_VALUE) << s.message();
  EXPECT_EQ(log_.executions.load(), 1);
  ASSERT_TRUE(t->g.execute(slots, ws).is_good());
  EXPECT_EQ(log_.executions.load(), 2);
}

TEST_F(Router, AutotuneReordersAndCachesTheOrder) {
  // The slow plan has the best estimate; autotune must put it last.
  add("alpha", kCppEngineIdBase + 500, {{"slow", 0, 1.0, 0, 20000}, {"fast", 1, 5.0, 0, 0}});
  add("beta", kCppEngineIdBase + 501, {{"mid", 3, 3.0, 0, 5000}});
  std::vector<float> x(8), y(8), o(8);
  std::unordered_map<int64_t, void*> pack{{10, x.data()}, {20, y.data()}, {30, o.data()}};

  auto t = make_graph();
  ASSERT_TRUE(t->g.build({HeurMode::A}, BuildPlanPolicy::ALL).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"alpha:slow", "beta:mid", "alpha:fast"}));
  ASSERT_TRUE(t->g.autotune(pack, nullptr).is_good());
  EXPECT_EQ(plan_names(t->g), (Names{"alpha:fast", "beta:mid", "alpha:slow"}));
  EXPECT_EQ(t->g.selected_plan(), 0);
  PlanInfo info;
  ASSERT_TRUE(t->g.get_plan_info_at_index(2, info).is_good());
  EXPECT_GE(info.measured_us, 20000.0);
  ASSERT_TRUE(t->g.execute(pack, nullptr).is_good());
  EXPECT_EQ(log_.last_plan, "fast");

  // The cache file exists and a fresh graph of the same structure starts from the tuned order.
  std::string path = plan_cache::cache_path(t->g, Target{});
  ASSERT_FALSE(path.empty());
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  EXPECT_EQ(path.rfind(cache_dir_.string(), 0), 0u);
  auto fresh = make_graph();
  ASSERT_TRUE(fresh->g.validate().is_good());
  EXPECT_EQ(plan_cache::cache_path(fresh->g, Target{}), path);
  ASSERT_TRUE(fresh->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(fresh->g), (Names{"alpha:fast", "beta:mid", "alpha:slow"}));
  ASSERT_TRUE(fresh->g.get_plan_info_at_index(0, info).is_good());
  EXPECT_GE(info.measured_us, 0.0);

  // A different graph (other shapes) does not see that order.
  auto other = make_graph(8);
  ASSERT_TRUE(other->g.validate().is_good());
  EXPECT_NE(plan_cache::cache_path(other->g, Target{}), path);
  ASSERT_TRUE(other->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(other->g), (Names{"alpha:slow", "beta:mid", "alpha:fast"}));

  // A plan the cache names but the engines no longer offer is skipped; the rest still apply.
  unregister_engine(kCppEngineIdBase + 501);
  auto fewer = make_graph();
  ASSERT_TRUE(fewer->g.create_execution_plans({HeurMode::A}).is_good());
  EXPECT_EQ(plan_names(fewer->g), (Names{"alpha:fast", "alpha:slow"}));
  add("beta", kCppEngineIdBase + 501, {{"mid", 3, 3.0, 0, 5000}});

  // A corrupt file is ignored with a warning, never a crash.
  for (const char* junk : {"garbage\n", "opendnn-plan-cache 1\nkey 0\n", "opendnn-plan-cache 1\nkey",
                           ""}) {
    { std::ofstream(path, std::ios::trunc) << junk; }
    auto again = make_graph();
    ASSERT_TRUE(again->g.validate().is_good());
    ::testing::internal::CaptureStderr();
    ASSERT_TRUE(again->g.create_execution_plans({HeurMode::A}).is_good());
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("ignoring plan cache file"), std::string::npos) << junk;
    EXPECT_EQ(plan_names(again->g), (Names{"alpha:slow", "beta:mid", "alpha:fast"}));
  }
  // A file for another device or version is foreign: ignored too.
  auto fp = plan_cache::graph_fingerprint(t->g);
  ASSERT_TRUE(plan_cache::write(path, fp, "cuda:sm90:132sm:dev0", {{kCppEngineIdBase + 500, 1, 1.0}}).is_good());
  std::vector<plan_cache::Entry> got;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(plan_cache::read(path, fp, "cpu", got));
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("written for device"), std::string::npos);
}

TEST_F(Router, PlanCacheWritesAreAtomicUnderConcurrency) {
  std::string path = (cache_dir_ / "sub" / "plans-test.txt").string();
  for (int w = 0; w < 8; ++w) add("writer" + std::to_string(w), kCppEngineIdBase + 600 + w, {});  // known ids
  std::vector<std::thread> threads;
  for (int w = 0; w < 8; ++w)
    threads.emplace_back([&, w] {
      std::vector<plan_cache::Entry> entries;
      for (int i = 0; i < 200; ++i) entries.push_back({kCppEngineIdBase + 600 + w, i, double(i)});
      for (int r = 0; r < 20; ++r) EXPECT_TRUE(plan_cache::write(path, 42, "cpu", entries).is_good());
    });
  std::atomic<bool> done{false};
  int reads = 0;
  std::thread reader([&] {
    while (!done) {
      std::vector<plan_cache::Entry> got;
      if (plan_cache::read(path, 42, "cpu", got)) {
        ASSERT_EQ(got.size(), 200u);  // never a torn file
        for (const auto& e : got) ASSERT_EQ(e.engine_id, got[0].engine_id);
        ++reads;
      }
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  reader.join();
  std::vector<plan_cache::Entry> got;
  EXPECT_TRUE(plan_cache::read(path, 42, "cpu", got));
  size_t files = 0;
  for (const auto& f : std::filesystem::directory_iterator(cache_dir_ / "sub")) {
    (void)f;
    ++files;
  }
  EXPECT_EQ(files, 1u);  // no temporary files left behind
}

TEST_F(Router, DefaultTargetHonoursEnvironment) {
  ::setenv("OPENDNN_TARGET", "cpu", 1);
  EXPECT_EQ(default_target().kind, DeviceKind::CPU);
  ::unsetenv("OPENDNN_TARGET");
  EXPECT_EQ(default_target().kind, DeviceKind::CPU);  // no engine reports a device here
}

// The attention tile model the engines' SDPA estimates share, on hand-counted tilings.
TEST(AttentionCost, CountsTilesBlocksAndDiagonals) {
  using opendnn::cost::AttentionShape;
  using opendnn::cost::attention_us;
  // Dense: 2 query tiles x 3 key blocks per head, 12 tiles on 4 SMs.
  EXPECT_DOUBLE_EQ(attention_us(AttentionShape{2, 3, 256, 384, false, false, false}, {1, 2, 0}, 4, 5), 5 + 6 * 14 / 4.0);
  // Causal top-left, 300 rows: tiles see 1, 2, 3 blocks, each with a diagonal; 3 tiles on 3 of 132 SMs.
  EXPECT_DOUBLE_EQ(attention_us(AttentionShape{1, 1, 300, 300, true, false, false}, {1, 2, 4}, 132, 5), 5 + 27 / 3.0);
  // Bottom-right with Skv > Sq: the one query tile sees all 4 key blocks; top-left only the first.
  EXPECT_DOUBLE_EQ(attention_us(AttentionShape{1, 1, 128, 512, true, true, false}, {0, 1, 0}, 132, 5), 9);
  EXPECT_DOUBLE_EQ(attention_us(AttentionShape{1, 1, 128, 512, true, false, false}, {0, 1, 0}, 132, 5), 6);
  // Bottom-right with Sq > Skv: only the last query tile sees a key.
  EXPECT_DOUBLE_EQ(attention_us(AttentionShape{1, 1, 512, 128, true, true, false}, {0, 1, 1}, 132, 5), 5 + 2 / 4.0);
  // Backward: the tiles are the 4 key tiles.
  EXPECT_DOUBLE_EQ(attention_us(AttentionShape{1, 1, 128, 512, false, false, true}, {1, 0, 0}, 132, 5), 6);
}
