// SPDX-License-Identifier: Apache-2.0
// opendnn run FILE.json [--engine NAME] [--inputs DIR] [--plans] [--save DIR] [--seed N]
// Reads a graph, plans it, fills its inputs (random, or .npy files), executes it, and prints the
// plan table and a checksum of every output.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "common/dtype_convert.h"
#include "graph_io.h"
#include "npy.h"
#include "opendnn/opendnn.h"

namespace opendnn::tools {

namespace {

struct RunOptions {
  std::string file;
  std::string engine;
  std::string inputs;
  std::string save;
  bool plans = false;
  uint64_t seed = 1234;
};

// A host buffer, 64-byte aligned.
struct Buffer {
  std::vector<std::byte> storage;
  std::byte* data = nullptr;
  void resize(size_t bytes) {
    storage.assign(bytes + 64, std::byte{0});
    auto p = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((64 - p % 64) % 64);
  }
};

std::string file_stem(const TensorAttr& t) {
  std::string s = t.get_name().empty() ? "uid" + std::to_string(t.get_uid()) : t.get_name();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

// Loads an .npy into the tensor's strided storage, converting element types.
bool load_input(const std::string& path, const TensorAttr& t, std::byte* dst, std::string& err) {
  NpyArray a;
  if (!read_npy(path, a, err)) return false;
  if (a.fortran_order) {
    err = path + ": fortran-ordered arrays are not supported";
    return false;
  }
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  if (n != t.volume()) {
    err = path + ": " + std::to_string(n) + " elements, but tensor \"" + t.get_name() + "\" " + dims_text(t.get_dim()) +
          " has " + std::to_string(t.volume());
    return false;
  }
  DataType src = a.dtype;
  if (src == DataType::NOT_SET) {  // raw bits: must match the tensor's element size
    if (bits_of(t.get_data_type()) != a.item_bytes * 8) {
      err = path + ": raw " + a.descr + " data does not match " + std::string(to_string(t.get_data_type()));
      return false;
    }
    src = t.get_data_type();
  }
  const auto& dims = t.get_dim();
  const auto& strides = t.get_stride();
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t off = 0;
    for (size_t i = 0; i < dims.size(); ++i) off += idx[i] * strides[i];
    store_element(t.get_data_type(), dst, off, load_element(src, a.data.data(), lin));
    for (size_t i = dims.size(); i-- > 0;) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
  return true;
}

// Integer inputs that carry sequence lengths must hold valid values, or the op has nothing to do:
// per-batch lengths get the full length, cumulative ones an even split of the tokens.
bool fill_lengths(const Graph& g, const TensorAttr& t, std::byte* dst) {
  for (const auto& n : g.nodes()) {
    const auto& ins = n->inputs();
    for (size_t i = 0; i < ins.size() && !n->spec().variadic(); ++i) {
      if (ins[i].get() != &t) continue;
      std::string_view port = n->spec().def->inputs[i].name;
      const TensorPtr& first = ins[0];
      if (!first || first->get_dim().empty()) return false;
      int64_t count = t.volume();
      if (port.substr(0, 6) == "cu_seq") {
        // GDN packs tokens in dim 0; SDPA's side has S tokens per sequence in dim 2.
        bool packed = n->kind() == OpKind::GDN || n->kind() == OpKind::GDN_BACKWARD;
        int64_t seqs = count - 1;
        int64_t per = first->get_dim().size() > 2 ? first->get_dim()[2] : 1;
        int64_t total = packed ? first->get_dim()[0] : seqs * per;
        for (int64_t k = 0; k < count; ++k) store_element(t.get_data_type(), dst, k, double(seqs ? total * k / seqs : 0));
        return true;
      }
      if (port.substr(0, 7) == "seq_len") {
        const TensorPtr& side = port == "seq_len_q" ? first : n->in("K");
        int64_t len = side && side->get_dim().size() > 2 ? side->get_dim()[2] : 1;
        for (int64_t k = 0; k < count; ++k) store_element(t.get_data_type(), dst, k, double(len));
        return true;
      }
    }
  }
  return false;
}

void fill_random(const TensorAttr& t, std::byte* dst, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  int64_t n = std::max<int64_t>(t.storage_elements(), 1);
  DataType dt = t.get_data_type();
  for (int64_t i = 0; i < n; ++i) {
    double v = 0.0;  // integer tensors (offsets, indices, seeds) get zeros: always in range
    if (is_floating(dt)) v = uni(rng);
    if (dt == DataType::BOOLEAN) v = double(rng() & 1);
    store_element(dt, dst, i, v);
  }
}

// Elements of a tensor in row-major order, as doubles.
template <class F>
void for_each_value(const TensorAttr& t, const std::byte* src, F&& f) {
  const auto& dims = t.get_dim();
  const auto& strides = t.get_stride();
  int64_t n = t.volume();
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t off = 0;
    for (size_t i = 0; i < dims.size(); ++i) off += idx[i] * strides[i];
    f(load_element(t.get_data_type(), src, off));
    for (size_t i = dims.size(); i-- > 0;) {
      if (++idx[i] < dims[i]) break;
      idx[i] = 0;
    }
  }
}

bool save_output(const std::string& dir, const TensorAttr& t, const std::byte* src, std::string& err) {
  DataType dt = t.get_data_type();
  std::string descr = npy_descr(dt);
  DataType as = dt;
  if (descr.empty()) {  // bf16, fp8, fp4: widened to float32 (exact)
    descr = "<f4";
    as = DataType::FLOAT;
  }
  int64_t n = t.volume();
  std::vector<std::byte> packed(size_t(std::max<int64_t>(n, 0)) * size_t(bits_of(as) / 8));
  int64_t i = 0;
  for_each_value(t, src, [&](double v) { store_element(as, packed.data(), i++, v); });
  std::string path = dir + "/" + file_stem(t) + ".npy";
  if (!write_npy(path, descr, t.get_dim(), packed.data(), packed.size(), err)) return false;
  std::printf("saved %s\n", path.c_str());
  return true;
}

double time_once_us(Graph& g, int64_t index, const std::unordered_map<int64_t, void*>& pack, void* ws, Status& s) {
  auto t0 = std::chrono::steady_clock::now();
  s = g.execute_plan_at_index(pack, ws, index);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

// One warm-up run, then the median of up to 5 (one when a run takes over 100 ms).
double measure_us(Graph& g, int64_t index, const std::unordered_map<int64_t, void*>& pack, void* ws, Status& s) {
  double first = time_once_us(g, index, pack, ws, s);
  if (s.is_bad()) return -1.0;
  if (first > 100000.0) return first;
  std::vector<double> t;
  for (int r = 0; r < 5 && s.is_good(); ++r) t.push_back(time_once_us(g, index, pack, ws, s));
  if (s.is_bad()) return -1.0;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int run_graph(const RunOptions& o) {
  Graph g;
  if (!load_graph_file(o.file, g)) return 1;
  auto fail = [&](const char* step, const Status& s) {
    std::fprintf(stderr, "error: %s: %s: %s\n", o.file.c_str(), step, s.to_string().c_str());
    return 1;
  };
  if (Status s = g.validate(); s.is_bad()) return fail("validate", s);
  if (Status s = g.create_execution_plans({HeurMode::A, HeurMode::FALLBACK}); s.is_bad())
    return fail("create_execution_plans", s);
  if (!o.engine.empty()) {
    std::set<std::string> others;
    bool offered = false;
    for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
      std::string e;
      if (g.get_engine_name_at_index(i, e).is_bad()) continue;
      if (e == o.engine) offered = true;
      else others.insert(e);
    }
    if (Status s = g.deselect_engines({others.begin(), others.end()}); s.is_bad()) return fail("deselect_engines", s);
    if (!offered) {
      std::string known;
      for (const auto& e : registered_engines()) known += (known.empty() ? "" : ", ") + std::string(e->name());
      std::fprintf(stderr, "error: engine '%s' offered no plan for this graph (registered engines: %s)\n",
                   o.engine.c_str(), known.c_str());
      Status s = g.check_support();
      if (s.is_bad()) std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
  }
  if (Status s = g.check_support(); s.is_bad()) return fail("check_support", s);
  if (Status s = g.build_plans(o.plans ? BuildPlanPolicy::ALL : BuildPlanPolicy::HEURISTICS_CHOICE); s.is_bad())
    return fail("build_plans", s);

  // Buffers for every variant slot; inputs filled, outputs zeroed.
  std::mt19937_64 rng(o.seed);
  std::vector<Buffer> buffers(g.variant_uids().size());
  std::unordered_map<int64_t, void*> pack;
  std::vector<TensorPtr> outputs;
  for (size_t k = 0; k < g.variant_uids().size(); ++k) {
    TensorPtr t = g.find_tensor(g.variant_uids()[k]);
    int64_t bytes = std::max<int64_t>(t->storage_bytes(), 16);
    buffers[k].resize(size_t(bytes));
    pack[t->get_uid()] = buffers[k].data;
    if (t->is_produced()) {
      outputs.push_back(t);
      continue;
    }
    std::string src;
    if (!o.inputs.empty()) {
      for (const std::string& stem : {file_stem(*t), std::to_string(t->get_uid())}) {
        std::string p = o.inputs + "/" + stem + ".npy";
        if (std::filesystem::exists(p)) {
          src = p;
          break;
        }
      }
    }
    if (!src.empty()) {
      std::string err;
      if (!load_input(src, *t, buffers[k].data, err)) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
      }
      std::printf("input %s <- %s\n", file_stem(*t).c_str(), src.c_str());
    } else {
      if (!(is_integer(t->get_data_type()) && fill_lengths(g, *t, buffers[k].data))) fill_random(*t, buffers[k].data, rng);
    }
  }
  int64_t ws_bytes = 0;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_good() && info.built) ws_bytes = std::max(ws_bytes, info.workspace_bytes);
  }
  Buffer ws;
  ws.resize(size_t(ws_bytes));

  // Time the plans (every built one with --plans, else the selected one), then run the selected
  // plan last so the outputs are its.
  const int64_t selected = g.selected_plan();
  std::vector<double> measured(size_t(g.get_execution_plan_count()), -1.0);
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_bad() || !info.built || info.deselected) continue;
    if (!o.plans && i != selected) continue;
    Status s;
    measured[size_t(i)] = measure_us(g, i, pack, ws.data, s);
    if (s.is_bad()) return fail(("execute plan " + std::to_string(i)).c_str(), s);
  }
  if (Status s = g.execute(pack, ws.data); s.is_bad()) return fail("execute", s);

  std::printf("%-4s %-12s %-28s %12s %12s %12s  %s\n", "idx", "engine", "plan", "est_us", "measured_us",
              "workspace", "state");
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_bad()) continue;
    const char* state = info.deselected ? "deselected" : i == selected ? "selected" : info.built ? "built" : "-";
    char meas[32] = "-";
    if (measured[size_t(i)] >= 0) std::snprintf(meas, sizeof meas, "%.1f", measured[size_t(i)]);
    std::printf("%-4lld %-12s %-28s %12.1f %12s %12lld  %s%s%s\n", static_cast<long long>(i), info.engine.c_str(),
                info.plan.c_str(), info.estimated_us, meas, static_cast<long long>(info.workspace_bytes), state,
                info.build_error.empty() ? "" : ": ", info.build_error.c_str());
  }

  std::printf("\n%-5s %-28s %-9s %-20s %16s %16s\n", "uid", "output", "type", "dims", "sum", "sum_abs");
  for (const auto& t : outputs) {
    double sum = 0.0, sum_abs = 0.0;
    size_t k = size_t(g.variant_slot_of(t->get_uid()));
    for_each_value(*t, buffers[k].data, [&](double v) {
      sum += v;
      sum_abs += std::fabs(v);
    });
    std::printf("%-5lld %-28s %-9s %-20s %16.6g %16.6g\n", static_cast<long long>(t->get_uid()), t->get_name().c_str(),
                std::string(to_string(t->get_data_type())).c_str(), dims_text(t->get_dim()).c_str(), sum, sum_abs);
  }
  if (!o.save.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.save, ec);
    for (const auto& t : outputs) {
      size_t k = size_t(g.variant_slot_of(t->get_uid()));
      std::string err;
      if (!save_output(o.save, *t, buffers[k].data, err)) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
      }
    }
  }
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Plan a Graph JSON v2 file, execute it on generated or given inputs");
  cmd->add_option("file", o->file, "graph file (- for stdin)")->required();
  cmd->add_option("--engine", o->engine, "use only this engine's plans (e.g. reference)");
  cmd->add_option("--inputs", o->inputs, "folder of .npy inputs named by tensor name or uid");
  cmd->add_flag("--plans", o->plans, "build and time every plan, not only the first");
  cmd->add_option("--save", o->save, "write every output as .npy into this folder");
  cmd->add_option("--seed", o->seed, "seed of the random inputs");
  cmd->callback([o] {
    if (int rc = run_graph(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
