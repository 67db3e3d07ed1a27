// SPDX-License-Identifier: Apache-2.0
// opendnn demo: builds a transformer block (RMSNorm -> Q/K/V projections -> causal GQA SDPA -> output
// projection + residual -> RMSNorm -> SwiGLU MLP + residual) and a gated-delta-net layer (RMSNorm ->
// projections -> gates -> GDN recurrence -> output projection + residual) in C++, runs each graph on
// the best plan the router offers, checks the result (against the reference engine, or against an
// fp64 computation when the best plan is the reference engine's) and prints timings.
// The graphs are cut where a reshape would be needed and joined through memory: the next graph's
// inputs are views of the previous graph's outputs (attention reads [S, H*DH] projections as
// [1, H, S, DH] with BSHD strides and writes its output the same way). Shapes and types are ones the
// GPU engines take: bf16 activations and weights (nn.Linear layout), plain 2-D GEMMs, head dim 64,
// bf16 q/k/v and fp32 gates for the GDN.
// With a CUDA device (and a CUDA runtime to load: the tool never links one), the buffers live on the
// device and graphs are planned for it. A graph no GPU engine takes whole runs node by node (the cuda
// engine takes single ops), and a node no GPU engine takes runs on the CPU; each line says where it
// ran. The reference engine's run, the check's baseline, is on the host either way.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common/cuda_runtime.h"
#include "common/dtype_convert.h"
#include "engines/reference/ref_kernel.h"
#include "opendnn/opendnn.h"

namespace opendnn::tools {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The CUDA runtime when the demo runs on the GPU (set once by run_demo), else null.
const cudart::Runtime* g_gpu = nullptr;

// CUDA failures end the demo: without its buffers it cannot go on.
void cuda_check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(g_gpu->failure(rc, what));
}

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { cuda_check(g_gpu->Malloc(&p, std::max<size_t>(bytes, 16)), "cudaMalloc"); }
  ~DeviceMem() { g_gpu->Free(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

// Plans made while one lives are for the CPU, the only target of the reference engine.
class CpuTarget {
 public:
  CpuTarget() : saved_(default_target()) { set_default_target(Target{}); }
  ~CpuTarget() { set_default_target(saved_); }
  CpuTarget(const CpuTarget&) = delete;
  CpuTarget& operator=(const CpuTarget&) = delete;

 private:
  Target saved_;
};

// Buffers for a graph's variant tensors, filled from / read into packed row-major doubles. Host
// memory, mirrored on the device for a GPU run: set() uploads, get() downloads.
class Buffers {
 public:
  explicit Buffers(bool device = false) : device_(device) {}
  bool on_device() const { return device_; }
  // Where plans read and write t.
  void* ptr(const TensorPtr& t) { return device_ ? entry(t).dev->p : host(t); }
  // `part` shares the memory of `whole`: its tensor in the graph `part`'s graph was split from, or
  // the output of an earlier graph that `part` reads (sized by `part` when `whole` has no memory yet:
  // a tensor the whole graph kept virtual may have another type in the part).
  void share(const TensorPtr& part, const TensorPtr& whole) {
    auto& w = bufs_[whole.get()];
    if (!w) {
      w = std::make_shared<Entry>();
      init(*w, part.get());
    }
    bufs_[part.get()] = w;
  }
  void* host(const TensorPtr& t) {
    auto& b = entry(t).bytes;
    auto p = reinterpret_cast<uintptr_t>(b.data());
    return b.data() + ((64 - p % 64) % 64);
  }
  // A plan that runs on the CPU after all works on the host copies: all down before, all up after.
  void download_all() {
    for (auto& [t, e] : bufs_) copy(*e, cudart::Runtime::kDeviceToHost);
  }
  void upload_all() {
    for (auto& [t, e] : bufs_) copy(*e, cudart::Runtime::kHostToDevice);
  }
  void set(const TensorPtr& t, const std::vector<double>& v) {
    void* d = host(t);
    int64_t i = 0;
    ref::for_each_index(t->get_dim(), [&](const int64_t* idx, int64_t) {
      int64_t off = 0;
      for (size_t k = 0; k < t->get_dim().size(); ++k) off += idx[k] * t->get_stride()[k];
      store_element(t->get_data_type(), d, off, v[size_t(i++)]);
    });
    if (device_) copy(entry(t), cudart::Runtime::kHostToDevice);
  }
  std::vector<double> get(const TensorPtr& t) {
    if (device_) copy(entry(t), cudart::Runtime::kDeviceToHost);
    const void* d = host(t);
    std::vector<double> v;
    v.reserve(size_t(t->volume()));
    ref::for_each_index(t->get_dim(), [&](const int64_t* idx, int64_t) {
      int64_t off = 0;
      for (size_t k = 0; k < t->get_dim().size(); ++k) off += idx[k] * t->get_stride()[k];
      v.push_back(load_element(t->get_data_type(), d, off));
    });
    return v;
  }

 private:
  struct Entry {
    size_t size = 0;
    std::vector<std::byte> bytes;  // 64 bytes over, for the alignment
    std::unique_ptr<DeviceMem> dev;
  };
  void init(Entry& e, const TensorAttr* t) {
    e.size = size_t(std::max<int64_t>(t->storage_bytes(), 16));
    e.bytes.assign(e.size + 64, std::byte{0});
    if (device_) {
      e.dev = std::make_unique<DeviceMem>(e.size);
      copy(e, cudart::Runtime::kHostToDevice);  // zeros, as on the host
    }
  }
  Entry& entry(const TensorPtr& t) {
    auto& e = bufs_[t.get()];
    if (!e) {
      e = std::make_shared<Entry>();
      init(*e, t.get());
    }
    return *e;
  }
  void copy(Entry& e, int kind) {
    if (!e.dev) return;
    auto p = reinterpret_cast<uintptr_t>(e.bytes.data());
    void* h = e.bytes.data() + ((64 - p % 64) % 64);
    bool up = kind == cudart::Runtime::kHostToDevice;
    cuda_check(g_gpu->Memcpy(up ? e.dev->p : h, up ? h : e.dev->p, e.size, kind), "cudaMemcpy");
  }

  bool device_;
  std::map<const TensorAttr*, std::shared_ptr<Entry>> bufs_;
};

// Device time of the work between start() and stop_ms() on the default stream: CUDA events where
// the runtime has them, else a device synchronisation and the host clock.
class DeviceTimer {
 public:
  DeviceTimer() {
    if (g_gpu->has_events()) {
      cuda_check(g_gpu->EventCreate(&start_), "cudaEventCreate");
      cuda_check(g_gpu->EventCreate(&stop_), "cudaEventCreate");
    }
  }
  ~DeviceTimer() {
    if (start_) g_gpu->EventDestroy(start_);
    if (stop_) g_gpu->EventDestroy(stop_);
  }
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;
  void start() {
    if (stop_) return cuda_check(g_gpu->EventRecord(start_, nullptr), "cudaEventRecord");
    cuda_check(g_gpu->DeviceSynchronize(), "cudaDeviceSynchronize");
    t0_ = Clock::now();
  }
  double stop_ms() {
    if (!stop_) {
      cuda_check(g_gpu->DeviceSynchronize(), "cudaDeviceSynchronize (a kernel failed)");
      return ms_since(t0_);
    }
    cuda_check(g_gpu->EventRecord(stop_, nullptr), "cudaEventRecord");
    cuda_check(g_gpu->EventSynchronize(stop_), "cudaEventSynchronize (a kernel failed)");
    float ms = 0;
    cuda_check(g_gpu->EventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return double(ms);
  }

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
  Clock::time_point t0_;
};

struct Ran {
  bool ok = false;
  bool skipped = false;
  std::string engine;
  double build_ms = 0, exec_ms = 0;
};

// Validates before buffers are sized (validation infers strides and types).
bool validated(Graph& g, const char* what) {
  Status s = g.validate();
  if (s.is_bad()) std::printf("  %-22s FAILED to validate: %s\n", what, s.to_string().c_str());
  return s.is_good();
}

// The router's reasons (one line per engine rule), indented under the graph's line; the first few.
void print_reasons(const Status& s) {
  const std::string m = s.message();
  size_t at = 0;
  int lines = 0;
  for (size_t nl; at < m.size(); at = nl + 1, ++lines) {
    nl = m.find('\n', at);
    if (nl == std::string::npos) nl = m.size();
    if (lines == 8) {
      std::printf("      ...\n");
      return;
    }
    std::string line = m.substr(at, nl - at);
    line.erase(0, line.find_first_not_of(' '));
    if (!line.empty()) std::printf("      %s\n", line.c_str());
  }
}

// One graph of the split below, with the uids of its tensors (the whole graph's uids).
struct Part {
  std::unique_ptr<Graph> graph;
  std::string name;
  std::vector<int64_t> uids;
};

// One single-node graph per node of g, in g's (topological) order, through Graph JSON: for engines
// that take single ops only (the cuda engine). A tensor g kept virtual that a node reads becomes a
// graph tensor of g's I/O type, what a framework running the ops one by one stores.
std::vector<Part> split_by_node(const Graph& g, std::string& error) {
  using Json = nlohmann::json;
  std::string text;
  if (Status s = g.serialize(text); s.is_bad()) {
    error = s.to_string();
    return {};
  }
  const Json doc = Json::parse(text);
  std::map<int64_t, Json> tensors;
  for (const auto& t : doc["tensors"]) tensors[t["uid"].get<int64_t>()] = t;
  std::set<int64_t> read;
  for (const auto& n : doc["nodes"])
    for (const auto& [port, uid] : n["inputs"].items())
      if (uid.is_number()) read.insert(uid.get<int64_t>());
  std::vector<Part> parts;
  for (const auto& n : doc["nodes"]) {
    Json sub = doc;
    sub["nodes"] = Json::array({n});
    sub["tensors"] = Json::array();
    Part part;
    part.name = n.value("name", std::string(n["tag"]));
    sub["context"]["name"] = part.name;
    auto add = [&](const Json& ref) {
      for (int64_t uid = ref.is_number() ? ref.get<int64_t>() : -1; uid >= 0 && tensors.count(uid);) {
        if (std::find(part.uids.begin(), part.uids.end(), uid) != part.uids.end()) return;
        part.uids.push_back(uid);
        Json t = tensors.at(uid);
        if (t["is_virtual"].get<bool>() && read.count(uid)) {
          t["is_virtual"] = false;
          t["data_type"] = doc["context"]["io_data_type"];
        }
        uid = t.contains("ragged_offset_uid") ? t["ragged_offset_uid"].get<int64_t>() : -1;
        sub["tensors"].push_back(std::move(t));
      }
    };
    for (const auto& [port, uid] : n["inputs"].items()) add(uid);
    for (const auto& [port, uid] : n["outputs"].items()) add(uid);
    part.graph = std::make_unique<Graph>();
    if (Status s = part.graph->deserialize(sub.dump()); s.is_bad()) {
      error = part.name + ": " + s.to_string();
      return {};
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

Ran plan_and_run(Graph& g, Buffers& b, const std::vector<HeurMode>& modes, const char* what);

// g node by node on the device buffers: each node on the best plan the router offers for it alone
// (on the CPU where no GPU engine takes it). Times add up.
Ran run_node_by_node(Graph& g, Buffers& b, const std::vector<HeurMode>& modes, const char* what) {
  Ran r;
  std::string error;
  std::vector<Part> parts = split_by_node(g, error);
  if (parts.empty()) {
    std::printf("  %-22s FAILED to split: %s\n", what, error.c_str());
    return r;
  }
  std::vector<std::string> engines;
  for (Part& p : parts) {
    const std::string label = "  " + p.name;
    if (!validated(*p.graph, label.c_str())) return r;
    for (int64_t uid : p.uids)
      if (TensorPtr part = p.graph->find_tensor(uid), whole = g.find_tensor(uid); part && whole) b.share(part, whole);
    Ran pr = plan_and_run(*p.graph, b, modes, label.c_str());
    if (!pr.ok) {
      pr.build_ms = pr.exec_ms = 0;
      return pr;
    }
    r.build_ms += pr.build_ms;
    r.exec_ms += pr.exec_ms;
    if (std::find(engines.begin(), engines.end(), pr.engine) == engines.end()) engines.push_back(pr.engine);
  }
  for (const auto& e : engines) r.engine += (r.engine.empty() ? "" : "+") + e;
  r.ok = true;
  std::printf("  %-22s engines %s   build %8.2f ms   execute %9.3f ms  (sum over %zu nodes)\n", what, r.engine.c_str(),
              r.build_ms, r.exec_ms, parts.size());
  return r;
}

// Plans g (best plan first), executes it and reports; pack maps every variant tensor. With device
// buffers, a graph no GPU engine takes runs node by node, and a node no GPU engine takes is planned
// for the CPU and runs on host copies.
Ran plan_and_run(Graph& g, Buffers& b, const std::vector<HeurMode>& modes, const char* what) {
  Ran r;
  auto t0 = Clock::now();
  Status s = g.build(modes);
  bool on_host = !b.on_device();
  if (!on_host && s.code() == ErrorCode::GRAPH_NOT_SUPPORTED && g.nodes().size() > 1) {
    std::printf("  %-22s no GPU plan for the whole graph, so node by node:\n", what);
    print_reasons(s);
    return run_node_by_node(g, b, modes, what);
  }
  if (!on_host && s.code() == ErrorCode::GRAPH_NOT_SUPPORTED) {
    std::printf("  %-22s no GPU plan, so it runs on the CPU:\n", what);
    print_reasons(s);
    CpuTarget cpu;
    s = g.build(modes);
    on_host = true;
  }
  r.build_ms = ms_since(t0);
  if (s.is_bad()) {
    r.skipped = s.code() == ErrorCode::GRAPH_NOT_SUPPORTED;
    std::printf("  %-22s %s: %s\n", what, r.skipped ? "skipped" : "FAILED", s.to_string().c_str());
    return r;
  }
  std::string name, plan;
  (void)g.get_engine_name_at_index(g.selected_plan(), name);
  (void)g.get_plan_name_at_index(g.selected_plan(), plan);
  r.engine = name;
  std::vector<void*> slots;
  for (int64_t uid : g.variant_uids()) slots.push_back(on_host ? b.host(g.find_tensor(uid)) : b.ptr(g.find_tensor(uid)));
  const size_t ws_bytes = size_t(g.get_workspace_size());
  std::vector<std::byte> host_ws(on_host ? ws_bytes + 1 : 0);
  std::unique_ptr<DeviceMem> dev_ws = on_host ? nullptr : std::make_unique<DeviceMem>(ws_bytes);
  std::unique_ptr<DeviceTimer> timer = on_host ? nullptr : std::make_unique<DeviceTimer>();
  if (on_host && b.on_device()) b.download_all();
  std::vector<double> times;
  // Device runs are cheap: more of them, the first (module loading) falls out of the median.
  const int runs = on_host ? 3 : 10;
  for (int i = 0; i < runs; ++i) {
    auto t1 = Clock::now();
    if (timer) timer->start();
    s = g.execute(slots.data(), on_host ? static_cast<void*>(host_ws.data()) : dev_ws->p);
    if (s.is_bad()) {
      std::printf("  %-22s FAILED: %s\n", what, s.to_string().c_str());
      return r;
    }
    times.push_back(timer ? timer->stop_ms() : ms_since(t1));
    if (times.back() > 2000) break;  // slow: one timing is enough
  }
  if (on_host && b.on_device()) b.upload_all();
  std::sort(times.begin(), times.end());
  r.exec_ms = times[times.size() / 2];
  r.ok = true;
  const char* where = !b.on_device() ? "" : on_host ? "  (cpu)" : "  (gpu)";
  // The plan's name too, where it says more than the engine's.
  if (r.engine == "reference") plan.clear();
  std::printf("  %-22s engine %-10s build %8.2f ms   execute %9.3f ms%s%s%s\n", what, r.engine.c_str(), r.build_ms,
              r.exec_ms, where, plan.empty() ? "" : "  ", plan.c_str());
  return r;
}

// On a GPU run, the host part (the reference engine's run) plans for the CPU.
std::unique_ptr<CpuTarget> host_plans_unless(bool gpu) { return g_gpu && !gpu ? std::make_unique<CpuTarget>() : nullptr; }

std::vector<double> random_values(std::mt19937_64& rng, size_t n, double scale, DataType round_as) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = round_to(round_as, u(rng));
  return v;
}

// ---- fp64 building blocks (row-major)
std::vector<double> mm(const std::vector<double>& a, const std::vector<double>& b, int64_t M, int64_t K, int64_t N) {
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      double av = a[size_t(i * K + k)];
      for (int64_t j = 0; j < N; ++j) c[size_t(i * N + j)] += av * b[size_t(k * N + j)];
    }
  return c;
}
std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& w, int64_t M, int64_t N, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < M; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < N; ++j) ss += x[size_t(i * N + j)] * x[size_t(i * N + j)];
    double r = 1.0 / std::sqrt(ss / double(N) + eps);
    for (int64_t j = 0; j < N; ++j) y[size_t(i * N + j)] = x[size_t(i * N + j)] * r * w[size_t(j)];
  }
  return y;
}
void round_all(std::vector<double>& v, DataType t) {
  for (auto& x : v) x = round_to(t, x);
}

struct Compare {
  double max_abs = 0, max_ref = 0;
  bool within(double tol) const { return max_abs <= tol * std::max(1.0, max_ref); }
};
Compare compare(const std::vector<double>& got, const std::vector<double>& want) {
  Compare c;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double d = std::fabs(got[i] - want[i]);
    c.max_abs = std::isnan(d) ? INFINITY : std::max(c.max_abs, d);
    c.max_ref = std::max(c.max_ref, std::fabs(want[i]));
  }
  return c;
}

// Checks `got` (from the best plans): against the reference engine's result when the best plan
// was another engine's, else against the fp64 result.
bool report_check(const char* what, bool all_reference, const std::vector<double>& got,
                  const std::vector<double>& reference_engine, const std::vector<double>& fp64, double tol) {
  Compare c = all_reference ? compare(got, fp64) : compare(got, reference_engine);
  bool ok = c.within(tol);
  std::printf("  check %-16s vs %-16s max |err| %.3e (max |ref| %.3e, tolerance %.1e x max(1,|ref|)): %s\n", what,
              all_reference ? "fp64" : "reference engine", c.max_abs, c.max_ref, tol, ok ? "OK" : "MISMATCH");
  return ok;
}

// A linear layer's weight [K, N] as nn.Linear stores it, [N, K] row-major (K contiguous): the layout of
// the cuda GEMM's pingpong and fp32-output kernels. Values still go in as [K, N] (Buffers::set).
TensorAttr weight(const std::string& name, int64_t k, int64_t n) {
  return TensorAttr().set_name(name).set_dim({1, 1, k, n}).set_stride({k * n, k * n, 1, k});
}

// [1, heads, seq, dh] over the memory of a row-major [seq, heads * dh] matrix (BSHD): how attention
// reads the projections' outputs and writes its own without a reshape.
TensorAttr heads_view(const std::string& name, int64_t heads, int64_t seq, int64_t dh) {
  return TensorAttr().set_name(name).set_dim({1, heads, seq, dh}).set_stride({seq * heads * dh, dh, heads * dh, 1});
}

// ------------------------------------------------------------------ transformer block

int transformer_block(std::mt19937_64& rng, bool& any_skipped) {
  const int64_t S = 128, D = 256, H = 8, HK = 2, DH = 64, F = 512;
  const double eps = 1e-5;
  const DataType bf = DataType::BFLOAT16;
  std::printf("transformer block: seq %lld, model %lld, %lld query heads / %lld kv heads of %lld, MLP %lld (bf16 I/O)\n",
              (long long)S, (long long)D, (long long)H, (long long)HK, (long long)DH, (long long)F);

  auto x = random_values(rng, size_t(S * D), 1.0, bf);
  auto n1 = random_values(rng, size_t(D), 0.5, bf);
  for (auto& v : n1) v = round_to(bf, 1.0 + v);
  auto n2 = random_values(rng, size_t(D), 0.5, bf);
  for (auto& v : n2) v = round_to(bf, 1.0 + v);
  auto wq = random_values(rng, size_t(D * H * DH), std::sqrt(3.0 / double(D)), bf);   // [D, H*DH]
  auto wk = random_values(rng, size_t(D * HK * DH), std::sqrt(3.0 / double(D)), bf);  // [D, HK*DH]
  auto wv = random_values(rng, size_t(D * HK * DH), std::sqrt(3.0 / double(D)), bf);
  auto wo = random_values(rng, size_t(H * DH * D), std::sqrt(3.0 / double(H * DH)), bf);  // [H*DH, D]
  auto w1 = random_values(rng, size_t(D * F), std::sqrt(3.0 / double(D)), bf);
  auto w3 = random_values(rng, size_t(D * F), std::sqrt(3.0 / double(D)), bf);
  auto w2 = random_values(rng, size_t(F * D), std::sqrt(3.0 / double(F)), bf);

  using Tensors = std::map<std::string, TensorPtr>;
  auto context = [&](Graph& g, const char* name) {
    g.set_name(name).set_io_data_type(bf).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  };
  auto eps_of = [&](Graph& g) {
    return g.tensor(TensorAttr().set_name("eps").set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_value(Scalar::of_float(float(eps))));
  };
  // Graph 1: RMSNorm -> Q/K/V projections, one plain GEMM each: [S, D] x [D, heads*DH].
  auto make_qkv = [&](Graph& g, Tensors& t) {
    context(g, "qkv");
    t["x"] = g.tensor(TensorAttr().set_name("x").set_dim({1, 1, S, D}));
    t["n1"] = g.tensor(TensorAttr().set_name("norm1.scale").set_dim({1, 1, 1, D}));
    auto [xn, inv] = g.rmsnorm(t["x"], t["n1"], eps_of(g), NodeAttrs().set_name("norm1").set("forward_phase", "INFERENCE"));
    (void)inv;
    t["wq"] = g.tensor(weight("wq", D, H * DH));
    t["wk"] = g.tensor(weight("wk", D, HK * DH));
    t["wv"] = g.tensor(weight("wv", D, HK * DH));
    for (const char* p : {"q", "k", "v"}) {
      t[p] = g.matmul(xn, t[std::string("w") + p], NodeAttrs().set_name(std::string(p) + "_proj"));
      t[p]->set_output(true).set_name(p).set_data_type(bf);
    }
  };
  // Graph 2: causal GQA SDPA on heads views of graph 1's outputs; O is written as [S, H*DH] (BSHD),
  // which the output projection reads as it is.
  auto make_attention = [&](Graph& g, Tensors& t) {
    context(g, "attention");
    t["q"] = g.tensor(heads_view("q", H, S, DH));
    t["k"] = g.tensor(heads_view("k", HK, S, DH));
    t["v"] = g.tensor(heads_view("v", HK, S, DH));
    auto outs = g.sdpa(t["q"], t["k"], t["v"],
                       NodeAttrs()
                           .set_name("attn")
                           .set("attn_scale_value", 1.0 / std::sqrt(double(DH)))
                           .set("diagonal_alignment", "TOP_LEFT")
                           .set("right_bound", int64_t(0)));
    t["o"] = outs[0];
    t["o"]->set_output(true).set_name("o").set_data_type(bf).set_stride(heads_view("o", H, S, DH).get_stride());
  };
  // Graph 3: output projection + residual -> RMSNorm -> SwiGLU MLP + residual.
  auto make_mlp = [&](Graph& g, Tensors& t) {
    context(g, "mlp");
    t["a"] = g.tensor(TensorAttr().set_name("attn").set_dim({1, 1, S, H * DH}));
    t["wo"] = g.tensor(weight("wo", H * DH, D));
    t["x"] = g.tensor(TensorAttr().set_name("x").set_dim({1, 1, S, D}));
    t["n2"] = g.tensor(TensorAttr().set_name("norm2.scale").set_dim({1, 1, 1, D}));
    t["w1"] = g.tensor(weight("w_gate", D, F));
    t["w3"] = g.tensor(weight("w_up", D, F));
    t["w2"] = g.tensor(weight("w_down", F, D));
    auto proj = g.matmul(t["a"], t["wo"], NodeAttrs().set_name("o_proj"));
    auto h = g.add(proj, t["x"], NodeAttrs().set_name("residual1"));
    auto [hn, inv] = g.rmsnorm(h, t["n2"], eps_of(g), NodeAttrs().set_name("norm2").set("forward_phase", "INFERENCE"));
    (void)inv;
    auto gate = g.matmul(hn, t["w1"], NodeAttrs().set_name("gate_proj"));
    auto up = g.matmul(hn, t["w3"], NodeAttrs().set_name("up_proj"));
    auto act = g.swish(gate, NodeAttrs().set_name("silu"));
    auto m = g.mul(act, up, NodeAttrs().set_name("swiglu"));
    auto down = g.matmul(m, t["w2"], NodeAttrs().set_name("down_proj"));
    t["y"] = g.add(down, h, NodeAttrs().set_name("residual2"));
    t["y"]->set_output(true).set_name("y");
  };

  // fp64 forward, rounding where the graphs materialise bf16 tensors (q, k, v, o, y).
  auto xn = rms(x, n1, S, D, eps);
  auto q = mm(xn, wq, S, D, H * DH), k = mm(xn, wk, S, D, HK * DH), v = mm(xn, wv, S, D, HK * DH);
  round_all(q, bf), round_all(k, bf), round_all(v, bf);
  std::vector<double> attn(size_t(S * H * DH));  // [S, H*DH]
  const double scale = 1.0 / std::sqrt(double(DH));
  for (int64_t h = 0; h < H; ++h) {
    const int64_t kh = h / (H / HK);
    for (int64_t i = 0; i < S; ++i) {
      std::vector<double> p(size_t(i + 1));
      double mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t e = 0; e < DH; ++e) s += q[size_t((i * H + h) * DH + e)] * k[size_t((j * HK + kh) * DH + e)];
        p[size_t(j)] = s * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      double den = 0;
      for (auto& pj : p) den += (pj = std::exp(pj - mx));
      for (int64_t e = 0; e < DH; ++e) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[size_t(j)] * v[size_t((j * HK + kh) * DH + e)];
        attn[size_t((i * H + h) * DH + e)] = round_to(bf, acc / den);
      }
    }
  }
  auto hres = mm(attn, wo, S, H * DH, D);
  for (size_t i = 0; i < hres.size(); ++i) hres[i] += x[i];
  auto hn = rms(hres, n2, S, D, eps);
  auto gate = mm(hn, w1, S, D, F), up = mm(hn, w3, S, D, F);
  std::vector<double> m(gate.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  auto y64 = mm(m, w2, S, F, D);
  for (size_t i = 0; i < y64.size(); ++i) y64[i] = round_to(bf, y64[i] + hres[i]);

  // Runs the three graphs with the given modes; returns the attention output ([S, H*DH]) and y.
  struct Result {
    bool ok = false, reference_only = true;
    std::vector<double> attn, y;
  };
  auto run_block = [&](const std::vector<HeurMode>& modes, const char* tag, bool gpu) {
    Result res;
    auto cpu = host_plans_unless(gpu);
    Graph g1, g2, g3;
    Tensors t1, t2, t3;
    make_qkv(g1, t1);
    make_attention(g2, t2);
    make_mlp(g3, t3);
    if (!validated(g1, "qkv graph") || !validated(g2, "attention graph") || !validated(g3, "mlp graph")) return res;
    // One set of buffers: each graph reads the memory the previous one wrote.
    Buffers b(gpu);
    for (const char* p : {"q", "k", "v"}) b.share(t2[p], t1[p]);
    b.share(t3["a"], t2["o"]), b.share(t3["x"], t1["x"]);
    b.set(t1["x"], x), b.set(t1["n1"], n1), b.set(t1["wq"], wq), b.set(t1["wk"], wk), b.set(t1["wv"], wv);
    b.set(t3["wo"], wo), b.set(t3["n2"], n2), b.set(t3["w1"], w1), b.set(t3["w3"], w3), b.set(t3["w2"], w2);
    std::printf(" %s\n", tag);
    const std::pair<Graph*, const char*> graphs[] = {{&g1, "qkv graph"}, {&g2, "attention graph"}, {&g3, "mlp graph"}};
    for (const auto& [g, what] : graphs) {
      Ran r = plan_and_run(*g, b, modes, what);
      if (!r.ok) {
        any_skipped = any_skipped || r.skipped;
        return res;
      }
      res.reference_only = res.reference_only && r.engine == "reference";
    }
    res.attn = b.get(t3["a"]);
    res.y = b.get(t3["y"]);
    res.ok = true;
    return res;
  };

  Result best = run_block({HeurMode::A, HeurMode::FALLBACK}, "best plans:", g_gpu != nullptr);
  if (!best.ok) return any_skipped ? 0 : 1;
  Result refr;
  if (!best.reference_only) {
    refr = run_block({HeurMode::FALLBACK}, "reference engine:", false);
    if (!refr.ok) return 1;
  }
  bool ok = report_check("attention", best.reference_only, best.attn, refr.attn, attn, 2e-2);
  ok = report_check("block output", best.reference_only, best.y, refr.y, y64, 3e-2) && ok;
  return ok ? 0 : 1;
}


// ------------------------------------------------------------------ gated delta net layer

int gdn_layer(std::mt19937_64& rng, bool& any_skipped) {
  const int64_t D = 256, H = 8, K = 64, V = 64;
  const std::vector<int64_t> lens{100, 156};
  const int64_t T = lens[0] + lens[1];
  const double eps = 1e-5;
  const DataType bf = DataType::BFLOAT16, f32 = DataType::FLOAT;
  std::printf("gated delta net layer: %lld tokens in %zu sequences, model %lld, %lld heads, K=V=%lld (bf16 I/O, fp32 gates)\n",
              (long long)T, lens.size(), (long long)D, (long long)H, (long long)K);

  auto x = random_values(rng, size_t(T * D), 1.0, bf);
  auto nw = random_values(rng, size_t(D), 0.5, bf);
  for (auto& v : nw) v = round_to(bf, 1.0 + v);
  double a = std::sqrt(3.0 / double(D));
  auto wq = random_values(rng, size_t(D * H * K), a, bf), wk = random_values(rng, size_t(D * H * K), a, bf);
  auto wv = random_values(rng, size_t(D * H * V), a, bf);
  auto wg = random_values(rng, size_t(D * H), a, bf), wb = random_values(rng, size_t(D * H), a, bf);
  auto wo = random_values(rng, size_t(H * V * D), std::sqrt(3.0 / double(H * V)), bf);
  std::vector<double> cu{0, double(lens[0]), double(T)};

  // fp64: projections, gates, the recurrence, output projection + residual, rounding where the graphs
  // materialise tensors (q, k, v, o, y in bf16; the gate logits and gates in fp32).
  auto xn = rms(x, nw, T, D, eps);
  auto q = mm(xn, wq, T, D, H * K), k = mm(xn, wk, T, D, H * K), v = mm(xn, wv, T, D, H * V);
  round_all(q, bf), round_all(k, bf), round_all(v, bf);
  auto gl = mm(xn, wg, T, D, H), bl = mm(xn, wb, T, D, H);
  round_all(gl, f32), round_all(bl, f32);
  std::vector<double> g(gl.size()), beta(bl.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = round_to(f32, -std::log1p(std::exp(gl[i])));
    beta[i] = round_to(f32, 1.0 / (1.0 + std::exp(-bl[i])));
  }
  std::vector<double> o(size_t(T * H * V), 0.0);
  {
    auto l2 = [&](std::vector<double>& m, int64_t t, int64_t h) {
      double ss = 0;
      for (int64_t e = 0; e < K; ++e) ss += m[size_t((t * H + h) * K + e)] * m[size_t((t * H + h) * K + e)];
      double r = 1.0 / std::sqrt(ss + 1e-6);
      for (int64_t e = 0; e < K; ++e) m[size_t((t * H + h) * K + e)] *= r;
    };
    auto qn = q, kn = k;
    const double s = 1.0 / std::sqrt(double(K));
    for (size_t n = 0; n < lens.size(); ++n)
      for (int64_t h = 0; h < H; ++h) {
        std::vector<double> S(size_t(K * V), 0.0);  // [K, V]
        for (int64_t t = int64_t(cu[n]); t < int64_t(cu[n + 1]); ++t) {
          l2(qn, t, h), l2(kn, t, h);
          const double al = std::exp(g[size_t(t * H + h)]), be = beta[size_t(t * H + h)];
          const double* kt = &kn[size_t((t * H + h) * K)];
          const double* vt = &v[size_t((t * H + h) * V)];
          const double* qt = &qn[size_t((t * H + h) * K)];
          for (auto& sv : S) sv *= al;
          std::vector<double> err(static_cast<size_t>(V));
          for (int64_t j = 0; j < V; ++j) {
            double p = 0;
            for (int64_t i = 0; i < K; ++i) p += S[size_t(i * V + j)] * kt[i];
            err[size_t(j)] = vt[j] - p;
          }
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < V; ++j) S[size_t(i * V + j)] += be * kt[i] * err[size_t(j)];
          for (int64_t j = 0; j < V; ++j) {
            double acc = 0;
            for (int64_t i = 0; i < K; ++i) acc += S[size_t(i * V + j)] * qt[i] * s;
            o[size_t((t * H + h) * V + j)] = round_to(bf, acc);
          }
        }
      }
  }
  auto y64 = mm(o, wo, T, H * V, D);
  for (size_t i = 0; i < y64.size(); ++i) y64[i] = round_to(bf, y64[i] + x[i]);

  struct Result {
    bool ok = false, reference_only = true;
    std::vector<double> o, y;
  };
  using Tensors = std::map<std::string, TensorPtr>;
  auto context = [&](Graph& gr, const char* name, DataType io) {
    gr.set_name(name).set_io_data_type(io).set_intermediate_data_type(f32).set_compute_data_type(f32);
  };
  // Graph 1: RMSNorm -> q/k/v projections (bf16) and gate logit projections (fp32 out).
  auto make_proj = [&](Graph& gr, Tensors& t) {
    context(gr, "gdn_proj", bf);
    t["x"] = gr.tensor(TensorAttr().set_name("x").set_dim({1, 1, T, D}));
    t["n"] = gr.tensor(TensorAttr().set_name("norm.scale").set_dim({1, 1, 1, D}));
    auto te = gr.tensor(TensorAttr().set_name("eps").set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_value(Scalar::of_float(float(eps))));
    auto [xn_t, inv] = gr.rmsnorm(t["x"], t["n"], te, NodeAttrs().set_name("norm").set("forward_phase", "INFERENCE"));
    (void)inv;
    const std::pair<const char*, int64_t> projs[] = {{"q", H * K}, {"k", H * K}, {"v", H * V}, {"g", H}, {"b", H}};
    for (const auto& [p, n] : projs) {
      t[std::string("w") + p] = gr.tensor(weight(std::string("w_") + p, D, n));
      t[p] = gr.matmul(xn_t, t[std::string("w") + p], NodeAttrs().set_name(std::string(p) + "_proj"));
      // The gate logits stay fp32: the gates' precision sets the state's decay.
      const bool gate = *p == 'g' || *p == 'b';
      t[p]->set_output(true).set_name(gate ? std::string(p) + "_logits" : p).set_data_type(gate ? f32 : bf);
    }
  };
  // Graph 2: the gates, in fp32: g = -softplus(g_logits) (log decay), beta = sigmoid(b_logits).
  auto make_gates = [&](Graph& gr, Tensors& t) {
    context(gr, "gdn_gates", f32);
    t["gl"] = gr.tensor(TensorAttr().set_name("g_logits").set_dim({1, 1, T, H}));
    t["bl"] = gr.tensor(TensorAttr().set_name("b_logits").set_dim({1, 1, T, H}));
    t["g"] = gr.neg(gr.softplus(t["gl"], NodeAttrs().set_name("g_softplus")), NodeAttrs().set_name("g_log"));
    t["beta"] = gr.sigmoid(t["bl"], NodeAttrs().set_name("beta"));
    t["g"]->set_output(true).set_name("g");
    t["beta"]->set_output(true).set_name("beta");
  };
  // Graph 3: the recurrence on the same memory, viewed as [T, H, K] and [T, H].
  auto make_gdn = [&](Graph& gr, Tensors& t) {
    context(gr, "gdn", bf);
    t["q"] = gr.tensor(TensorAttr().set_name("q").set_dim({T, H, K}));
    t["k"] = gr.tensor(TensorAttr().set_name("k").set_dim({T, H, K}));
    t["v"] = gr.tensor(TensorAttr().set_name("v").set_dim({T, H, V}));
    t["g"] = gr.tensor(TensorAttr().set_name("g").set_dim({T, H}).set_data_type(f32));
    t["beta"] = gr.tensor(TensorAttr().set_name("beta").set_dim({T, H}).set_data_type(f32));
    t["cu"] = gr.tensor(TensorAttr().set_name("cu_seqlens").set_dim({3}).set_data_type(DataType::INT32));
    auto outs = gr.gdn(t["q"], t["k"], t["v"], t["g"], t["beta"], t["cu"],
                       NodeAttrs().set_name("gated_delta_net").set("use_qk_l2norm", true));
    t["o"] = outs[0];
    t["o"]->set_output(true).set_name("o").set_data_type(bf);
  };
  // Graph 4: output projection + residual (one GEMM with a residual epilogue).
  auto make_out = [&](Graph& gr, Tensors& t) {
    context(gr, "gdn_out", bf);
    t["o"] = gr.tensor(TensorAttr().set_name("o").set_dim({1, 1, T, H * V}));
    t["wo"] = gr.tensor(weight("w_o", H * V, D));
    t["x"] = gr.tensor(TensorAttr().set_name("x").set_dim({1, 1, T, D}));
    t["y"] = gr.add(gr.matmul(t["o"], t["wo"], NodeAttrs().set_name("o_proj")), t["x"], NodeAttrs().set_name("residual"));
    t["y"]->set_output(true).set_name("y");
  };

  auto run_layer = [&](const std::vector<HeurMode>& modes, const char* tag, bool gpu) {
    Result res;
    auto cpu = host_plans_unless(gpu);
    Graph g1, g2, g3, g4;
    Tensors t1, t2, t3, t4;
    make_proj(g1, t1);
    make_gates(g2, t2);
    make_gdn(g3, t3);
    make_out(g4, t4);
    if (!validated(g1, "projection graph") || !validated(g2, "gate graph") || !validated(g3, "gdn graph") ||
        !validated(g4, "output graph"))
      return res;
    // One set of buffers: each graph reads the memory the previous ones wrote.
    Buffers b(gpu);
    b.share(t2["gl"], t1["g"]), b.share(t2["bl"], t1["b"]);
    for (const char* p : {"q", "k", "v"}) b.share(t3[p], t1[p]);
    b.share(t3["g"], t2["g"]), b.share(t3["beta"], t2["beta"]);
    b.share(t4["o"], t3["o"]), b.share(t4["x"], t1["x"]);
    b.set(t1["x"], x), b.set(t1["n"], nw), b.set(t1["wq"], wq), b.set(t1["wk"], wk), b.set(t1["wv"], wv);
    b.set(t1["wg"], wg), b.set(t1["wb"], wb), b.set(t3["cu"], cu), b.set(t4["wo"], wo);
    std::printf(" %s\n", tag);
    const std::pair<Graph*, const char*> graphs[] = {
        {&g1, "projection graph"}, {&g2, "gate graph"}, {&g3, "gdn graph"}, {&g4, "output graph"}};
    for (const auto& [gr, what] : graphs) {
      Ran r = plan_and_run(*gr, b, modes, what);
      if (!r.ok) {
        any_skipped = any_skipped || r.skipped;
        return res;
      }
      res.reference_only = res.reference_only && r.engine == "reference";
    }
    res.o = b.get(t3["o"]);
    res.y = b.get(t4["y"]);
    res.ok = true;
    return res;
  };

  Result best = run_layer({HeurMode::A, HeurMode::FALLBACK}, "best plans:", g_gpu != nullptr);
  if (!best.ok) return any_skipped ? 0 : 1;
  Result refr;
  if (!best.reference_only) {
    refr = run_layer({HeurMode::FALLBACK}, "reference engine:", false);
    if (!refr.ok) return 1;
  }
  // bf16 q/k/v and output: |o| is ~0.1 here, so 1e-2 is ~10% of it (a wrong kernel is off by ~100%).
  bool ok = report_check("gdn output", best.reference_only, best.o, refr.o, o, 1e-2);
  ok = report_check("layer output", best.reference_only, best.y, refr.y, y64, 3e-2) && ok;
  return ok ? 0 : 1;
}


int run_demo(uint64_t seed) {
  auto t0 = Clock::now();
  std::printf("opendnn %s demo\nengines:", kVersion);
  for (const auto& e : registered_engines()) std::printf(" %s(%lld)", std::string(e->name()).c_str(), (long long)e->engine_id());
  Target target = default_target();
  std::printf("\ntarget: %s", target.kind == DeviceKind::CPU ? "cpu" : "cuda");
  if (target.kind != DeviceKind::CPU) {
    std::printf(" (device %d, sm_%d, %d SMs)\n", target.device, target.sm_version, target.sm_count);
    // The buffers need the CUDA runtime; the tool loads it rather than link it.
    const cudart::Runtime& rt = cudart::runtime();
    std::string why = !rt.ok() ? rt.error : rt.device_count() == 0 ? rt.name + " sees no device" : "";
    if (why.empty()) why = rt.failure(rt.SetDevice(target.device), "cudaSetDevice");
    if (why.empty()) {
      g_gpu = &rt;
      std::printf("buffers: device memory (%s); the reference engine's run is on the host\n\n", rt.name.c_str());
    } else {
      std::printf("(no device buffers: %s; so the demo plans for the CPU)\n\n", why.c_str());
      set_default_target(Target{});
    }
  } else {
    std::printf("\n\n");
  }
  std::mt19937_64 rng(seed);
  bool skipped = false;
  int rc = 0;
  try {
    rc = transformer_block(rng, skipped);
    std::printf("\n");
    rc |= gdn_layer(rng, skipped);
  } catch (const std::exception& e) {
    std::printf("  FAILED: %s\n", e.what());
    rc = 1;
  }
  std::printf("\ndemo %s in %.2f s%s\n", rc == 0 ? "passed" : "FAILED", ms_since(t0) / 1000.0,
              skipped ? " (some graphs were skipped: an op has no kernel yet)" : "");
  return rc;
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto seed = std::make_shared<uint64_t>(2026);
  CLI::App* cmd = app.add_subcommand("demo", "Build and run a transformer block and a gated-delta-net layer");
  cmd->add_option("--seed", *seed, "seed of the weights and inputs");
  cmd->callback([seed] {
    if (int rc = run_demo(*seed)) throw CLI::RuntimeError(rc);
  });
}

}  // namespace opendnn::tools
