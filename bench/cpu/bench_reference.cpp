// SPDX-License-Identifier: Apache-2.0
// Host micro-benchmarks of the reference engine's kernels (Google Benchmark).
//   OMP_NUM_THREADS=1 ./bench_reference --benchmark_filter=Matmul
// GFLOP/s counters are per CPU second of the benchmark thread (less sensitive to a busy machine);
// the wall-clock rate is reported beside it.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdlib>
#include <vector>

#include "engines/reference/gemm.h"
#include "engines/reference/ref_kernel.h"
#include "opendnn/graph.h"

using namespace opendnn;

namespace {

struct Bound {
  std::vector<std::vector<std::byte>> mem;
  ref::Args args;
  std::vector<std::byte> scratch;
};

ref::View view_of(const TensorPtr& t, std::vector<std::vector<std::byte>>& mem) {
  ref::View v;
  v.attr = t.get();
  v.dtype = t->get_data_type();
  v.dims = t->get_dim();
  v.strides = t->get_stride();
  mem.emplace_back(size_t(t->storage_bytes()) + 64);
  for (size_t i = 0; i < mem.back().size(); ++i) mem.back()[i] = std::byte((i * 37) & 0x3f);  // small finite values
  v.data = mem.back().data();
  return v;
}

Bound bind(const Node& n, const ref::Kernel& k) {
  Bound b;
  b.mem.reserve(n.inputs().size() + n.outputs().size());
  for (const auto& t : n.inputs()) b.args.in.push_back(t ? view_of(t, b.mem) : ref::View{});
  for (const auto& t : n.outputs()) b.args.out.push_back(view_of(t, b.mem));
  b.scratch.resize(size_t(k.scratch_bytes ? k.scratch_bytes(n) : 0) + 64);
  auto p = reinterpret_cast<uintptr_t>(b.scratch.data());
  b.args.scratch = b.scratch.data() + (64 - p % 64) % 64;
  return b;
}

void report(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ref::gemm::isa());
}

void BM_MatmulF32(benchmark::State& state) {
  const int64_t n = state.range(0);
  Graph g;
  auto a = g.tensor(TensorAttr().set_name("a").set_dim({n, n}).set_stride({n, 1}).set_data_type(DataType::FLOAT));
  auto b = g.tensor(TensorAttr().set_name("b").set_dim({n, n}).set_stride({n, 1}).set_data_type(DataType::FLOAT));
  auto c = g.matmul(a, b);
  c->set_output(true).set_data_type(DataType::FLOAT);
  if (!g.validate().is_good()) {
    state.SkipWithError("validate failed");
    return;
  }
  const Node& node = *g.nodes().back();
  const ref::Kernel* k = ref::kernel_for(OpKind::MATMUL);
  Bound bd = bind(node, *k);
  for (auto _ : state) {
    Status s = k->run(node, bd.args);
    benchmark::DoNotOptimize(bd.mem.back().data());
    if (s.is_bad()) state.SkipWithError("run failed");
  }
  report(state, 2.0 * double(n) * double(n) * double(n));
}
BENCHMARK(BM_MatmulF32)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);

void BM_ConvFpropF32(benchmark::State& state) {
  // N=8, C=64, H=W=28, K=64, 3x3, pad 1.
  const int64_t N = 8, C = 64, H = 28, W = 28, K = 64, R = 3;
  Graph g;
  auto x = g.tensor(TensorAttr().set_name("x").set_dim({N, C, H, W}).set_stride({C * H * W, 1, W * C, C}).set_data_type(DataType::FLOAT));
  auto w = g.tensor(TensorAttr().set_name("w").set_dim({K, C, R, R}).set_stride({C * R * R, 1, R * C, C}).set_data_type(DataType::FLOAT));
  auto y = g.conv_fprop(x, w, NodeAttrs().set("pre_padding", {1, 1}).set("post_padding", {1, 1}).set("stride", {1, 1}).set("dilation", {1, 1}));
  y->set_output(true).set_data_type(DataType::FLOAT);
  if (!g.validate().is_good()) {
    state.SkipWithError("validate failed (conv rules)");
    return;
  }
  const Node& node = *g.nodes().back();
  const ref::Kernel* k = ref::kernel_for(OpKind::CONV_FPROP);
  if (!k) {
    state.SkipWithError("no conv kernel");
    return;
  }
  Bound bd = bind(node, *k);
  for (auto _ : state) {
    Status s = k->run(node, bd.args);
    if (s.is_bad()) state.SkipWithError("run failed");
  }
  report(state, 2.0 * double(N * K * H * W) * double(C * R * R));
}
BENCHMARK(BM_ConvFpropF32)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
