// SPDX-License-Identifier: Apache-2.0
// The reference plan: everything is resolved at build time; execute() binds View::data pointers from
// the slot array, the workspace and the plan's constants into a per-call copy of the steps' Args, then
// runs each node's kernel. Nothing shared changes during execute(), so calls may run concurrently.
#include "engines/reference/plan.h"
#include "engines/reference/ragged_check.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <unordered_set>

#include "common/checked_math.h"

namespace opendnn::ref {

namespace {

constexpr int64_t kAlign = 64;
// cur + bytes rounded up to kAlign; false on int64 overflow.
bool advance(int64_t& cur, int64_t bytes) {
  int64_t end = 0;
  if (bytes < 0 || !cm::add(cur, bytes, end) || !cm::add(end, kAlign - 1, end)) return false;
  cur = end / kAlign * kAlign;
  return true;
}

std::unordered_set<const TensorAttr*> consumed_tensors(const Graph& g) {
  std::unordered_set<const TensorAttr*> used;
  for (const auto& n : g.nodes()) {
    for (const auto& t : n->inputs())
      if (t) used.insert(t.get());
    // A port tensor's ragged offset is read too (passed after the input ports).
    for (const auto* ports : {&n->inputs(), &n->outputs()})
      for (const auto& t : *ports)
        if (t && t->get_ragged_offset()) used.insert(t->get_ragged_offset().get());
  }
  return used;
}

bool is_constant(const TensorAttr& t) { return t.get_is_pass_by_value() && t.get_value().is_set(); }

// Where a port's data comes from at execute time.
struct Source {
  enum Kind : uint8_t { NONE, SLOT, WORKSPACE, CONSTANT } kind = NONE;
  int64_t index = 0;  // slot number, workspace byte offset, or constant number
};

// A ragged offset a step reads: args.in[view] holds the offsets of the tensor `of`.
struct RaggedUse {
  size_t view = 0;
  const TensorAttr* of = nullptr;
};

struct Step {
  const Node* node = nullptr;
  const Kernel* kernel = nullptr;
  Args args;
  std::vector<Source> in;
  std::vector<Source> out;
  std::vector<RaggedUse> ragged;
  bool scratch = false;
};

// Every ragged offset a step will read addresses its tensor's storage (see ragged_check.h).
Status check_ragged_offsets(const Step& s, const Args& args) {
  for (const RaggedUse& r : s.ragged) {
    const View& v = args.in[r.view];
    if (!v.present()) continue;  // the kernel reports missing data
    int64_t count = std::min(v.volume(), r.of->get_dim().empty() ? int64_t(0) : r.of->get_dim()[0]);
    std::string why = batch_offsets_error(r.of->get_dim(), r.of->get_stride(), r.of->get_name().c_str(), v.data, v.dtype, count);
    if (!why.empty())
      return s.node->fail(ErrorCode::INVALID_VARIANT_PACK, "ragged offset (uid " + std::to_string(v.attr ? v.attr->get_uid() : -1) +
                                                               ") of tensor \"" + r.of->get_name() + "\": " + why);
  }
  return {};
}

// The Args of every step with one call's data pointers. Steps themselves never change after build, so
// concurrent execute() calls each bind their own copy (see ReferencePlan::Lease).
struct Binding {
  std::vector<Args> args;  // one per step
  std::atomic<bool> busy{true};
};

class ReferencePlan final : public Plan {
 public:
  std::vector<Step> steps;
  std::vector<std::array<uint64_t, 2>> constants;  // one 16-byte cell per pass-by-value constant
  WorkspaceLayout layout;

  ~ReferencePlan() override {
    for (auto& cell : pool_) delete cell.load(std::memory_order_acquire);
  }

  int64_t workspace_size() const override { return layout.bytes; }

  // Fills the first binding at build time, so a plan executed by one thread at a time never allocates.
  void prime() {
    auto b = fresh_binding();
    b->busy.store(false, std::memory_order_relaxed);
    pool_[0].store(b.release(), std::memory_order_release);
  }

  Status execute(void* const* slots, void* workspace, void*) override {
    std::byte* base = nullptr;
    if (workspace) {
      auto p = reinterpret_cast<uintptr_t>(workspace);
      base = reinterpret_cast<std::byte*>((p + uintptr_t(kAlign - 1)) & ~uintptr_t(kAlign - 1));
    }
    Lease lease(*this);
    for (size_t k = 0; k < steps.size(); ++k) {
      const Step& s = steps[k];
      Args& a = lease.binding->args[k];
      for (size_t i = 0; i < s.in.size(); ++i) a.in[i].data = resolve(s.in[i], slots, base);
      for (size_t i = 0; i < s.out.size(); ++i) a.out[i].data = resolve(s.out[i], slots, base);
      a.scratch = s.scratch ? base + layout.scratch_offset : nullptr;
      Status st = s.ragged.empty() ? Status{} : check_ragged_offsets(s, a);
      if (st.is_good()) st = s.kernel->run(*s.node, a);
      if (st.is_bad()) {
        if (st.message().find(s.node->name()) != std::string::npos) return st;
        return s.node->fail(st.code() == ErrorCode::OK ? ErrorCode::GRAPH_EXECUTION_FAILED : st.code(), st.message());
      }
    }
    return {};
  }

 private:
  // Bindings kept for reuse. A call takes a free one with one compare-exchange; the first cell is
  // filled at build (prime), the first call to need another cell fills it, and a call that finds
  // every cell busy binds a copy of its own.
  static constexpr size_t kPool = 16;
  std::array<std::atomic<Binding*>, kPool> pool_{};

  std::unique_ptr<Binding> fresh_binding() const {
    auto b = std::make_unique<Binding>();
    b->args.reserve(steps.size());
    for (const Step& s : steps) b->args.push_back(s.args);
    return b;
  }

  struct Lease {
    explicit Lease(ReferencePlan& p) {
      for (auto& cell : p.pool_) {
        Binding* b = cell.load(std::memory_order_acquire);
        if (!b) {
          auto fresh = p.fresh_binding();  // busy from the start
          if (cell.compare_exchange_strong(b, fresh.get(), std::memory_order_acq_rel)) {
            binding = fresh.release();
            return;
          }
        }
        bool expected = false;
        if (b->busy.compare_exchange_strong(expected, true, std::memory_order_acquire)) {
          binding = b;
          return;
        }
      }
      own = p.fresh_binding();
      binding = own.get();
    }
    ~Lease() {
      if (!own) binding->busy.store(false, std::memory_order_release);
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Binding* binding = nullptr;
    std::unique_ptr<Binding> own;
  };

  void* resolve(const Source& src, void* const* slots, std::byte* base) const {
    switch (src.kind) {
      case Source::NONE: return nullptr;
      case Source::SLOT: return slots[src.index];
      case Source::WORKSPACE: return base + src.index;
      // Kernels only read their inputs: the constant cells are never written.
      case Source::CONSTANT: return const_cast<uint64_t*>(constants[size_t(src.index)].data());
    }
    return nullptr;
  }
};

}  // namespace

WorkspaceLayout layout_workspace(const Graph& g) {
  WorkspaceLayout l;
  auto used = consumed_tensors(g);
  int64_t cur = 0;
  bool fits = true;
  for (const auto& n : g.nodes())
    for (const auto& t : n->outputs()) {
      if (!t || !t->get_is_virtual() || is_constant(*t) || !used.count(t.get()) || l.offsets.count(t.get())) continue;
      l.offsets.emplace(t.get(), cur);
      fits = fits && advance(cur, std::max<int64_t>(t->storage_bytes(), 1));
    }
  for (const auto& n : g.nodes()) {
    const Kernel* k = kernel_for(n->kind());
    if (k && k->scratch_bytes) l.scratch_bytes = std::max(l.scratch_bytes, k->scratch_bytes(*n));
  }
  l.scratch_offset = cur;
  fits = fits && advance(cur, l.scratch_bytes);
  if (cur > 0) fits = fits && cm::add(cur, kAlign, cur);  // slack to align the caller's pointer
  l.bytes = fits ? cur : -1;
  return l;
}

Status build_reference_plan(const Graph& g, std::unique_ptr<Plan>& out) {
  auto declines = reference_declines(g);
  if (!declines.empty()) return {ErrorCode::GRAPH_NOT_SUPPORTED, declines.front()};
  auto plan = std::make_unique<ReferencePlan>();
  plan->layout = layout_workspace(g);
  if (plan->layout.bytes < 0)
    return {ErrorCode::GRAPH_NOT_SUPPORTED, "the reference engine's workspace for this graph overflows int64 bytes"};

  // Constants first, so their cells never move.
  std::unordered_map<const TensorAttr*, int64_t> const_index;
  auto add_constant = [&](const TensorPtr& t) {
    if (t && is_constant(*t) && !const_index.count(t.get())) {
      int64_t k = int64_t(const_index.size());
      const_index.emplace(t.get(), k);
    }
  };
  for (const auto& n : g.nodes()) {
    for (const auto& t : n->inputs()) add_constant(t);
    for (const auto* ports : {&n->inputs(), &n->outputs()})
      for (const auto& t : *ports)
        if (t) add_constant(t->get_ragged_offset());
  }
  plan->constants.assign(const_index.size(), {0, 0});
  for (const auto& [t, k] : const_index) {
    void* cell = plan->constants[size_t(k)].data();
    const Scalar& v = t->get_value();
    DataType dt = t->get_data_type();
    if (is_integer(v.type) && dt == DataType::INT64) {
      std::memcpy(cell, &v.i, sizeof v.i);
    } else if (is_integer(v.type) && dt == DataType::INT32) {
      int32_t x = int32_t(std::clamp<int64_t>(v.i, INT32_MIN, INT32_MAX));
      std::memcpy(cell, &x, sizeof x);
    } else {
      store_element(dt, cell, 0, v.as_double());
    }
  }

  auto source_of = [&](const TensorPtr& t, Source& src) -> Status {
    src = {};
    if (!t) return {};
    if (is_constant(*t)) {
      src = {Source::CONSTANT, const_index.at(t.get())};
      return {};
    }
    if (!t->get_is_virtual()) {
      int64_t slot = g.variant_slot_of(t->get_uid());
      if (slot < 0)
        return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED,
                "tensor \"" + t->get_name() + "\" (uid " + std::to_string(t->get_uid()) +
                    ") has no variant-pack slot: plan the graph with create_execution_plans() first"};
      src = {Source::SLOT, slot};
      return {};
    }
    auto it = plan->layout.offsets.find(t.get());
    if (it != plan->layout.offsets.end()) src = {Source::WORKSPACE, it->second};
    return {};  // a virtual output nobody reads: data stays null and the kernel skips it
  };
  auto view_of = [](const TensorPtr& t) {
    View v;
    if (!t) return v;
    v.attr = t.get();
    v.dtype = t->get_data_type();
    v.dims = t->get_dim();
    v.strides = t->get_stride();
    return v;
  };

  for (const auto& n : g.nodes()) {
    Step s;
    s.node = n.get();
    s.kernel = kernel_for(n->kind());
    s.scratch = s.kernel->scratch_bytes && s.kernel->scratch_bytes(*n) > 0;
    for (const auto& t : n->inputs()) {
      s.args.in.push_back(view_of(t));
      Source src;
      OPENDNN_RETURN_IF_ERROR(source_of(t, src));
      s.in.push_back(src);
    }
    // Ragged offsets after the input ports (the convention in ref_kernel.h): one View per port whose
    // tensor has a ragged offset, input ports first, then output ports, in port order.
    for (const auto* ports : {&n->inputs(), &n->outputs()})
      for (const auto& t : *ports) {
        if (!t || !t->get_ragged_offset()) continue;
        const TensorPtr& r = t->get_ragged_offset();
        s.ragged.push_back({s.args.in.size(), t.get()});
        s.args.in.push_back(view_of(r));
        Source src;
        OPENDNN_RETURN_IF_ERROR(source_of(r, src));
        s.in.push_back(src);
      }
    for (const auto& t : n->outputs()) {
      s.args.out.push_back(view_of(t));
      Source src;
      OPENDNN_RETURN_IF_ERROR(source_of(t, src));
      s.out.push_back(src);
    }
    plan->steps.push_back(std::move(s));
  }
  plan->prime();
  out = std::move(plan);
  return {};
}

}  // namespace opendnn::ref
