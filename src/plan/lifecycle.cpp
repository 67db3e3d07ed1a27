// SPDX-License-Identifier: Apache-2.0
// Placeholder lifecycle until the router lands: every call reports that planning is not available.
#include "opendnn/engine.h"
#include "plan/exec_state.h"

namespace opendnn {

namespace {
Status not_yet() { return {ErrorCode::GRAPH_NOT_SUPPORTED, "not supported: execution is not implemented yet"}; }
const std::vector<int64_t> kNoUids;
}  // namespace

Status Graph::build_operation_graph() { return validated_ ? Status{} : validate(); }
Status Graph::create_execution_plans(const std::vector<HeurMode>&) { return not_yet(); }
Status Graph::check_support() { return not_yet(); }
Status Graph::build_plans(BuildPlanPolicy) { return not_yet(); }
Status Graph::build_plan_at_index(int64_t) { return not_yet(); }
Status Graph::build(const std::vector<HeurMode>&, BuildPlanPolicy) { return not_yet(); }
int64_t Graph::get_execution_plan_count() const { return 0; }
Status Graph::get_plan_name_at_index(int64_t, std::string&) const { return not_yet(); }
Status Graph::get_engine_name_at_index(int64_t, std::string&) const { return not_yet(); }
Status Graph::get_workspace_size(int64_t&) const { return not_yet(); }
int64_t Graph::get_workspace_size() const { return 0; }
Status Graph::get_workspace_size_plan_at_index(int64_t, int64_t&) const { return not_yet(); }
Status Graph::select_plan(int64_t) { return not_yet(); }
int64_t Graph::selected_plan() const { return -1; }
Status Graph::deselect_engines(const std::vector<std::string>&) { return not_yet(); }
Status Graph::deselect_workspace_greater_than(int64_t) { return not_yet(); }
const std::vector<int64_t>& Graph::variant_uids() const { return kNoUids; }
Status Graph::execute(const std::unordered_map<int64_t, void*>&, void*, void*) { return not_yet(); }
Status Graph::execute(const std::unordered_map<TensorPtr, void*>&, void*, void*) { return not_yet(); }
Status Graph::execute(void* const*, void*, void*) { return not_yet(); }
Status Graph::execute_plan_at_index(const std::unordered_map<int64_t, void*>&, void*, int64_t, void*) { return not_yet(); }
Status Graph::autotune(const std::unordered_map<int64_t, void*>&, void*, void*) { return not_yet(); }

void register_engine(std::shared_ptr<Engine>) {}
void unregister_engine(int64_t) {}
std::vector<std::shared_ptr<Engine>> registered_engines() { return {}; }
Target default_target() { return {}; }
void set_default_target(const Target&) {}

}  // namespace opendnn
