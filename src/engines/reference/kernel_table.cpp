// SPDX-License-Identifier: Apache-2.0
// Maps each op to its reference kernel. Declarations are weak so an op without a kernel yet links
// as null and the engine declines it by name rather than failing to build.
#include <atomic>

#include "engines/reference/kern_util.h"
#include "engines/reference/ref_kernel.h"

namespace opendnn::ref {

#define OPENDNN_OP(e, m, tag, npos, nout) extern const Kernel kernel_##e __attribute__((weak));
#include "opendnn/ops.def"
#undef OPENDNN_OP

namespace {
const Kernel* const kTable[] = {
#define OPENDNN_OP(e, m, tag, npos, nout) &kernel_##e,
#include "opendnn/ops.def"
#undef OPENDNN_OP
};
}  // namespace

const Kernel* kernel_for(OpKind kind) {
  const Kernel* k = kTable[static_cast<size_t>(kind)];
  return (k && k->run) ? k : nullptr;
}

int64_t View::volume() const {
  int64_t v = 1;
  for (int64_t d : dims) v *= d;
  return v;
}

namespace ku {
namespace {
std::atomic<int64_t> g_parallel_min_work{kParallelMinWork};
}  // namespace
int64_t parallel_min_work() { return g_parallel_min_work.load(std::memory_order_relaxed); }
void set_parallel_min_work(int64_t w) { g_parallel_min_work.store(w < 0 ? 0 : w, std::memory_order_relaxed); }
}  // namespace ku

}  // namespace opendnn::ref
