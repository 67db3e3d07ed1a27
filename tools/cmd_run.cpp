// SPDX-License-Identifier: Apache-2.0
// opendnn run FILE.json [--engine NAME] [--inputs DIR [--convert] [--fill-missing]] [--plans] [--save DIR]
//                       [--seed N]
// Reads a graph, plans it, fills its inputs (random, or .npy files), executes it, and prints the
// plan table and a checksum of every output.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "commands.h"
#include "common/dtype_convert.h"
#include "graph_io.h"
#include "engines/reference/ragged_check.h"
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
  bool convert = false;
  bool fill_missing = false;
  uint64_t seed = 1234;
};

// A host buffer, zeroed and 64-byte aligned. Allocated with calloc, so that a size the machine cannot
// give is reported (never an abort, even under sanitizers that refuse huge operator new requests).
struct Buffer {
  std::unique_ptr<std::byte, decltype(&std::free)> storage{nullptr, &std::free};
  std::byte* data = nullptr;
  // False (with a message on stderr naming `what`) when the memory cannot be had.
  bool resize(size_t bytes, const std::string& what) {
    storage.reset(bytes <= SIZE_MAX - 64 ? static_cast<std::byte*>(std::calloc(bytes + 64, 1)) : nullptr);
    if (!storage) {
      std::fprintf(stderr, "error: cannot allocate %zu bytes for %s: out of memory\n", bytes, what.c_str());
      return false;
    }
    auto p = reinterpret_cast<uintptr_t>(storage.get());
    data = storage.get() + ((64 - p % 64) % 64);
    return true;
  }
};

std::string file_stem(const TensorAttr& t) {
  std::string s = t.get_name().empty() ? "uid" + std::to_string(t.get_uid()) : t.get_name();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return s;
}

// One file stem per variant tensor, unique on disk: a stem two tensors share gets "_uid<N>".
std::unordered_map<int64_t, std::string> unique_stems(const Graph& g) {
  std::unordered_map<std::string, int> count;
  for (int64_t uid : g.variant_uids()) ++count[file_stem(*g.find_tensor(uid))];
  std::unordered_map<int64_t, std::string> out;
  for (int64_t uid : g.variant_uids()) {
    std::string s = file_stem(*g.find_tensor(uid));
    out[uid] = count[s] > 1 ? s + "_uid" + std::to_string(uid) : s;
  }
  return out;
}

std::vector<int64_t> squeezed(const std::vector<int64_t>& dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims)
    if (d != 1) out.push_back(d);
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// The element type of an .npy for tensor t: numpy's own types map one to one; raw 2-byte data is an
// ml_dtypes bfloat16 array; raw 1-byte data is taken as the tensor's FP8 type (its bits). NOT_SET
// (with err) when the data cannot be typed.
DataType npy_source_type(const NpyArray& a, const TensorAttr& t, const std::string& path, std::string& err) {
  if (a.dtype != DataType::NOT_SET) return a.dtype;
  if (a.item_bytes == 2) return DataType::BFLOAT16;
  if (is_fp8(t.get_data_type())) return t.get_data_type();
  err = path + ": raw 1-byte " + a.descr + " data (an ml_dtypes float8/float4/int4 array) can feed only an FP8 tensor, not \"" +
        t.get_name() + "\" " + std::string(to_string(t.get_data_type()));
  return DataType::NOT_SET;
}

// Loads an .npy into the tensor's strided storage. Its shape must be the tensor's dims (dims of 1
// aside) and its type the tensor's type; other types are converted (by value) only with `convert`.
bool load_input(const std::string& path, const TensorAttr& t, bool convert, std::byte* dst, std::string& err) {
  NpyArray a;
  if (!read_npy(path, a, err)) return false;
  if (a.fortran_order) {
    err = path + ": fortran-ordered arrays are not supported (save with np.ascontiguousarray)";
    return false;
  }
  if (squeezed(a.shape) != squeezed(t.get_dim())) {
    err = path + ": shape " + shape_text(a.shape) + " does not match the dims " + dims_text(t.get_dim()) + " of tensor \"" +
          t.get_name() + "\"";
    return false;
  }
  DataType src = npy_source_type(a, t, path, err);
  if (src == DataType::NOT_SET) return false;
  if (src != t.get_data_type() && !convert) {
    err = path + ": holds " + std::string(to_string(src)) + " (" + a.descr + ") but tensor \"" + t.get_name() + "\" is " +
          std::string(to_string(t.get_data_type())) + "; pass --convert to convert the values";
    return false;
  }
  const auto& dims = t.get_dim();
  const auto& strides = t.get_stride();
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t lin = 0, n = t.volume(); lin < n; ++lin) {
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

bool is_sdpa(OpKind k) {
  return k == OpKind::SDPA || k == OpKind::SDPA_BACKWARD || k == OpKind::SDPA_FP8 || k == OpKind::SDPA_FP8_BACKWARD;
}

// The tensor on a port of n (input or output), or null.
const TensorAttr* port_tensor(const Node& n, std::string_view port) {
  int i = n.spec().input_index(port);
  if (i >= 0 && size_t(i) < n.inputs().size()) return n.inputs()[size_t(i)].get();
  i = n.spec().output_index(port);
  if (i >= 0 && size_t(i) < n.outputs().size()) return n.outputs()[size_t(i)].get();
  return nullptr;
}

// The 4-D token tensors of one side of an SDPA node (q: Q, O, dO, dQ; kv: K, V, dK, dV).
std::vector<const TensorAttr*> sdpa_side(const Node& n, bool kv) {
  static constexpr const char* kQ[] = {"Q", "O", "dO", "dQ"};
  static constexpr const char* kKv[] = {"K", "V", "dK", "dV"};
  std::vector<const TensorAttr*> out;
  for (const char* p : kv ? kKv : kQ)
    if (const TensorAttr* t = port_tensor(n, p); t && t->get_dim().size() == 4) out.push_back(t);
  return out;
}

// Integer inputs that carry sequence lengths or offsets must hold valid values, or the op has nothing
// to do, and they must stay inside the tensors they index: per-batch lengths get the full length of
// their side, cumulative ones S tokens per sequence of their side (SDPA) or an even split of the
// packed tokens (GDN), and ragged offsets the start of each batch entry (b * stride of dim 0).
bool fill_lengths(const Graph& g, const TensorAttr& t, std::byte* dst) {
  const DataType dt = t.get_data_type();
  const int64_t count = t.volume();
  for (const auto& n : g.nodes()) {
    for (const auto* ports : {&n->inputs(), &n->outputs()})
      for (const auto& x : *ports)
        if (x && x->get_ragged_offset().get() == &t && !x->get_dim().empty()) {
          for (int64_t k = 0; k < count; ++k) store_element(dt, dst, k, double(k * x->get_stride()[0]));
          return true;
        }
    const auto& ins = n->inputs();
    for (size_t i = 0; i < ins.size() && !n->spec().variadic(); ++i) {
      if (ins[i].get() != &t) continue;
      std::string_view port = n->spec().def->inputs[i].name;
      const bool kv = port.size() > 3 && port.substr(port.size() - 3) == "_kv";
      if (port.substr(0, 6) == "cu_seq") {
        const TensorPtr& first = ins[0];
        if (!first || first->get_dim().empty()) return false;
        int64_t seqs = count - 1, total = first->get_dim()[0], per = 0;
        if (is_sdpa(n->kind())) {
          auto side = sdpa_side(*n, kv);
          if (side.empty()) return false;
          per = side[0]->get_dim()[2];
        }
        for (int64_t k = 0; k < count; ++k)
          store_element(dt, dst, k, double(per > 0 ? k * per : seqs ? total * k / seqs : 0));
        return true;
      }
      if (port.substr(0, 7) == "seq_len" && is_sdpa(n->kind())) {
        auto side = sdpa_side(*n, kv);
        int64_t len = side.empty() ? 1 : side[0]->get_dim()[2];
        for (int64_t k = 0; k < count; ++k) store_element(dt, dst, k, double(len));
        return true;
      }
    }
  }
  return false;
}

// Offsets a kernel adds to a tensor's address must keep it inside the tensor's storage: ragged
// offsets of every tensor, and SDPA's cumulative lengths (token starts). Checked before any plan runs.
bool check_offsets(const Graph& g, const std::unordered_map<int64_t, void*>& pack, std::string& err) {
  auto data_of = [&](const TensorAttr* t) -> const void* {
    auto it = t ? pack.find(t->get_uid()) : pack.end();
    return it == pack.end() ? nullptr : it->second;
  };
  auto check = [&](const TensorAttr& x, const TensorAttr& offs, const char* what, int64_t scale) {
    const void* data = data_of(&offs);
    if (!data || x.get_dim().empty()) return true;
    int64_t count = std::min(offs.volume(), x.get_dim()[0]);
    std::string why = ref::batch_offsets_error(x.get_dim(), x.get_stride(), x.get_name().c_str(), data, offs.get_data_type(),
                                               count, scale);
    if (why.empty()) return true;
    err = std::string(what) + " \"" + offs.get_name() + "\" (uid " + std::to_string(offs.get_uid()) + "): " + why;
    return false;
  };
  for (const auto& n : g.nodes()) {
    for (const auto* ports : {&n->inputs(), &n->outputs()})
      for (const auto& x : *ports)
        if (x && x->get_ragged_offset() && !check(*x, *x->get_ragged_offset(), "ragged offset", 1)) return false;
    if (!is_sdpa(n->kind())) continue;
    for (bool kv : {false, true}) {
      const TensorAttr* cu = port_tensor(*n, kv ? "cu_seq_len_kv" : "cu_seq_len_q");
      if (!cu) continue;
      if (kv && port_tensor(*n, "page_table_k")) continue;  // paged K/V: pages are addressed by the tables
      for (const TensorAttr* x : sdpa_side(*n, kv))
        if (!x->get_ragged_offset() && !check(*x, *cu, "cumulative sequence lengths", x->get_stride()[2])) return false;
    }
  }
  return true;
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

bool save_output(const std::string& path, const TensorAttr& t, const std::byte* src, std::string& err) {
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

// The .npy for an input in --inputs: <stem>.npy or <uid>.npy ("" when neither exists).
std::string input_file(const std::string& dir, const std::string& stem, int64_t uid) {
  for (const std::string& name : {stem, std::to_string(uid)}) {
    std::string p = dir + "/" + name + ".npy";
    std::error_code ec;
    if (std::filesystem::exists(p, ec)) return p;
  }
  return {};
}

// Allocates every variant slot and fills the inputs: from --inputs (every input needs its file,
// unless --fill-missing), else generated. Outputs are zeroed. Returns an exit code (0 = fine).
int fill_inputs(const Graph& g, const RunOptions& o, const std::unordered_map<int64_t, std::string>& stems,
                std::vector<Buffer>& buffers, std::unordered_map<int64_t, void*>& pack, std::vector<TensorPtr>& outputs) {
  if (!o.inputs.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(o.inputs, ec)) {
      std::fprintf(stderr, "error: --inputs %s: %s\n", o.inputs.c_str(),
                   std::filesystem::exists(o.inputs, ec) ? "not a directory" : "no such directory");
      return 1;
    }
  }
  std::mt19937_64 rng(o.seed);
  for (size_t k = 0; k < g.variant_uids().size(); ++k) {
    TensorPtr t = g.find_tensor(g.variant_uids()[k]);
    int64_t bytes = std::max<int64_t>(t->storage_bytes(), 16);
    if (!buffers[k].resize(size_t(bytes), "tensor \"" + t->get_name() + "\" " + dims_text(t->get_dim()))) return 1;
    pack[t->get_uid()] = buffers[k].data;
    if (t->is_produced()) {
      outputs.push_back(t);
      continue;
    }
    const std::string& stem = stems.at(t->get_uid());
    std::string src = o.inputs.empty() ? std::string() : input_file(o.inputs, stem, t->get_uid());
    if (!src.empty()) {
      std::string err;
      if (!load_input(src, *t, o.convert, buffers[k].data, err)) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
      }
      std::printf("input %s <- %s\n", stem.c_str(), src.c_str());
      continue;
    }
    if (!o.inputs.empty() && !o.fill_missing) {
      std::fprintf(stderr, "error: --inputs %s has no %s.npy (or %lld.npy) for input tensor \"%s\" %s %s "
                   "(pass --fill-missing to generate inputs without a file)\n", o.inputs.c_str(), stem.c_str(),
                   static_cast<long long>(t->get_uid()), t->get_name().c_str(),
                   std::string(to_string(t->get_data_type())).c_str(), dims_text(t->get_dim()).c_str());
      return 1;
    }
    if (!(is_integer(t->get_data_type()) && fill_lengths(g, *t, buffers[k].data))) fill_random(*t, buffers[k].data, rng);
  }
  std::string err;
  if (!check_offsets(g, pack, err)) {
    std::fprintf(stderr, "error: %s: %s\n", o.file.c_str(), err.c_str());
    return 1;
  }
  return 0;
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
  std::vector<Buffer> buffers(g.variant_uids().size());
  std::unordered_map<int64_t, void*> pack;
  std::vector<TensorPtr> outputs;
  const auto stems = unique_stems(g);
  if (int rc = fill_inputs(g, o, stems, buffers, pack, outputs)) return rc;
  int64_t ws_bytes = 0;
  for (int64_t i = 0; i < g.get_execution_plan_count(); ++i) {
    PlanInfo info;
    if (g.get_plan_info_at_index(i, info).is_good() && info.built) ws_bytes = std::max(ws_bytes, info.workspace_bytes);
  }
  Buffer ws;
  if (!ws.resize(size_t(ws_bytes), "the workspace")) return 1;

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
    if (ec) {
      std::fprintf(stderr, "error: cannot create %s: %s\n", o.save.c_str(), ec.message().c_str());
      return 1;
    }
    for (const auto& t : outputs) {
      size_t k = size_t(g.variant_slot_of(t->get_uid()));
      std::string err;
      if (!save_output(o.save + "/" + stems.at(t->get_uid()) + ".npy", *t, buffers[k].data, err)) {
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
  cmd->add_option("--inputs", o->inputs,
                  "folder of .npy inputs named by tensor name or uid (name_uid<N> where names repeat); every input "
                  "needs one, of the tensor's dims and data type");
  cmd->add_flag("--convert", o->convert, "convert .npy inputs of another data type to the tensor's (by value)");
  cmd->add_flag("--fill-missing", o->fill_missing, "generate the inputs --inputs has no file for");
  cmd->add_flag("--plans", o->plans, "build and time every plan, not only the first");
  cmd->add_option("--save", o->save,
                  "write every output as .npy into this folder (named by tensor name, name_uid<N> where names repeat)");
  cmd->add_option("--seed", o->seed, "seed of the random inputs");
  cmd->callback([o] {
    if (int rc = run_graph(*o)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
