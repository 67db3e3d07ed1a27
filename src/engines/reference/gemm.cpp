// SPDX-License-Identifier: Apache-2.0
// Blocked, packed GEMM in double for the reference engine (see gemm.h).
//
// Loop nest (per thread, one C tile of MC x NC at a time, tiles spread over threads):
//   for pc in K step KC: pack A[ic:+MC, pc:+KC] into MR-row panels, B[pc:+KC, jc:+NC] into NR-col
//   panels (both as double, zero-padded), then for each NR panel, for each MR panel: the micro-kernel
//   accumulates an MR x NR block over KC into a double accumulator tile (MC x NC) in scratch.
//   After the last K block the tile is scaled, its amax taken, and rounded once into C.
// Scratch per thread: (MC*KC + KC*NC + MC*NC) doubles (~1.3 MB at most); threads = min(OpenMP's
// max threads, number of processors, 32, tiles), or 1 below ku::kParallelMinWork multiply-adds.
#include "engines/reference/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/dtype_convert.h"
#include "engines/reference/kern_util.h"

namespace opendnn::ref::gemm {
namespace {

constexpr int64_t kMC = 96;   // multiple of every MR (6, 4)
constexpr int64_t kNC = 384;  // multiple of every NR (16, 12, 4)
constexpr int64_t kKC = 256;
constexpr int64_t kMRound = 12;  // lcm of the MRs
constexpr int64_t kNRound = 48;  // lcm of the NRs
constexpr int kMaxSlots = 32;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

struct Tiles {
  int64_t mc, nc, kc;
};
Tiles tiles_for(int64_t M, int64_t N, int64_t K) {
  return {std::min(kMC, round_up(std::max<int64_t>(M, 1), kMRound)), std::min(kNC, round_up(std::max<int64_t>(N, 1), kNRound)),
          std::min(kKC, std::max<int64_t>(K, 1))};
}
int64_t slot_doubles(const Tiles& t) { return t.mc * t.kc + t.kc * t.nc + t.mc * t.nc; }
int slot_count() { return std::max(1, std::min(omp_get_num_procs(), kMaxSlots)); }

// ---- micro-kernels: acc[MR][NR] stays in registers once both loops are unrolled.
template <int MR, int NR, bool kFma>
inline __attribute__((always_inline)) void ukr_body(int64_t kc, const double* __restrict a, const double* __restrict b,
                                                    double* __restrict c, int64_t ldc, bool accumulate) {
  double acc[MR][NR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const double* ak = a + k * MR;
    const double* bk = b + k * NR;
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const double ai = ak[i];
#pragma GCC unroll 32
      for (int j = 0; j < NR; ++j) {
        if constexpr (kFma)
          acc[i][j] = __builtin_fma(ai, bk[j], acc[i][j]);
        else
          acc[i][j] += ai * bk[j];
      }
    }
  }
  if (accumulate) {
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) c[i * ldc + j] += acc[i][j];
  } else {
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
  }
}

using Ukr = void (*)(int64_t, const double*, const double*, double*, int64_t, bool);

__attribute__((target("avx512f,avx2,fma"))) void ukr_avx512(int64_t kc, const double* a, const double* b, double* c,
                                                             int64_t ldc, bool accumulate) {
  ukr_body<6, 16, true>(kc, a, b, c, ldc, accumulate);
}
__attribute__((target("avx2,fma"))) void ukr_avx2(int64_t kc, const double* a, const double* b, double* c, int64_t ldc,
                                                  bool accumulate) {
  ukr_body<4, 12, true>(kc, a, b, c, ldc, accumulate);
}
void ukr_generic(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, bool accumulate) {
  ukr_body<4, 4, false>(kc, a, b, c, ldc, accumulate);
}

struct Isa {
  const char* name;
  int mr, nr;
  Ukr ukr;
};

Isa choose(std::string_view want) {
    __builtin_cpu_init();
    if (want != "generic" && want != "avx2" && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma"))
      return Isa{"avx512", 6, 16, ukr_avx512};
    if (want != "generic" && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return Isa{"avx2", 4, 12, ukr_avx2};
    return Isa{"generic", 4, 4, ukr_generic};
}

Isa& current() {
  static Isa chosen = [] {
    const char* env = std::getenv("OPENDNN_REF_GEMM");
    return choose(env ? env : "");
  }();
  return chosen;
}
const Isa& pick() { return current(); }

// dst[t * ds] = X(b, r, c0 + t) for t < n.
void gather_row(const Operand& x, int64_t b, int64_t r, int64_t c0, int64_t n, double* dst, int64_t ds) {
  if (x.fn) {
    for (int64_t t = 0; t < n; ++t) dst[t * ds] = x.fn(x.ctx, b, r, c0 + t);
    return;
  }
  const int64_t base = (x.batch_off ? x.batch_off[b] : 0) + x.row_off[r];
  const int64_t* co = x.col_off + c0;
  switch (x.dtype) {
    case DataType::FLOAT: {
      const float* d = static_cast<const float*>(x.data) + base;
      for (int64_t t = 0; t < n; ++t) dst[t * ds] = double(d[co[t]]);
      return;
    }
    case DataType::DOUBLE: {
      const double* d = static_cast<const double*>(x.data) + base;
      for (int64_t t = 0; t < n; ++t) dst[t * ds] = d[co[t]];
      return;
    }
    case DataType::HALF: {
      const uint16_t* d = static_cast<const uint16_t*>(x.data) + base;
      for (int64_t t = 0; t < n; ++t) dst[t * ds] = half_to_double(d[co[t]]);
      return;
    }
    case DataType::BFLOAT16: {
      const uint16_t* d = static_cast<const uint16_t*>(x.data) + base;
      for (int64_t t = 0; t < n; ++t) dst[t * ds] = bf16_to_double(d[co[t]]);
      return;
    }
    default:
      for (int64_t t = 0; t < n; ++t) dst[t * ds] = load_element(x.dtype, x.data, base + co[t]);
      return;
  }
}

void run_tile(const Problem& p, const Isa& isa, const Tiles& tl, int64_t b, int64_t ic, int64_t jc, double* slot,
              double& amax) {
  const int mr = isa.mr, nr = isa.nr;
  const int64_t mc = std::min(kMC, p.M - ic), nc = std::min(kNC, p.N - jc);
  const int64_t mcp = round_up(mc, mr), ncp = round_up(nc, nr);
  double* ap = slot;
  double* bp = ap + tl.mc * tl.kc;
  double* cacc = bp + tl.kc * tl.nc;
  if (p.K == 0) std::fill(cacc, cacc + mcp * ncp, 0.0);
  for (int64_t pc = 0; pc < p.K; pc += kKC) {
    const int64_t kc = std::min(kKC, p.K - pc);
    // A: panels of mr rows, [panel][k][i].
    for (int64_t i = 0; i < mcp; ++i) {
      double* dst = ap + (i / mr) * kc * mr + (i % mr);
      if (i < mc)
        gather_row(p.a, b, ic + i, pc, kc, dst, mr);
      else
        for (int64_t k = 0; k < kc; ++k) dst[k * mr] = 0.0;
    }
    // B: panels of nr columns, [panel][k][j].
    for (int64_t j0 = 0; j0 < ncp; j0 += nr) {
      double* panel = bp + j0 * kc;
      const int64_t nv = std::max<int64_t>(0, std::min<int64_t>(nr, nc - j0));
      for (int64_t k = 0; k < kc; ++k) {
        double* dst = panel + k * nr;
        gather_row(p.b, b, pc + k, jc + j0, nv, dst, 1);
        for (int64_t j = nv; j < nr; ++j) dst[j] = 0.0;
      }
    }
    for (int64_t j0 = 0; j0 < ncp; j0 += nr)
      for (int64_t i0 = 0; i0 < mcp; i0 += mr)
        isa.ukr(kc, ap + i0 * kc, bp + j0 * kc, cacc + i0 * ncp + j0, ncp, pc > 0);
  }
  // Store: D = alpha * acc; amax over D; C = round(D * out_scale).
  const Output& c = p.c;
  const int64_t cb = c.batch_off ? c.batch_off[b] : 0;
  double local = 0.0;
  for (int64_t i = 0; i < mc; ++i) {
    const int64_t rb = cb + c.row_off[ic + i];
    const int64_t* co = c.col_off + jc;
    const double* src = cacc + i * ncp;
    if (p.amax)
      for (int64_t j = 0; j < nc; ++j) {
        double a = std::fabs(src[j] * p.alpha);
        if (std::isnan(a) || a > local) local = a;  // a NaN sticks
      }
    const double s = p.alpha * p.out_scale;
    switch (c.dtype) {
      case DataType::FLOAT: {
        float* d = static_cast<float*>(c.data) + rb;
        for (int64_t j = 0; j < nc; ++j) d[co[j]] = float(src[j] * s);
        break;
      }
      case DataType::DOUBLE: {
        double* d = static_cast<double*>(c.data) + rb;
        for (int64_t j = 0; j < nc; ++j) d[co[j]] = src[j] * s;
        break;
      }
      default:
        for (int64_t j = 0; j < nc; ++j) store_element(c.dtype, c.data, rb + co[j], src[j] * s);
    }
  }
  if (std::isnan(local) || local > amax) amax = local;
}

}  // namespace

const char* isa() { return pick().name; }
const char* force_isa(const char* name) {
  current() = choose(name ? name : "");
  return current().name;
}

int64_t scratch_bytes(int64_t M, int64_t N, int64_t K) {
  return int64_t(slot_count()) * slot_doubles(tiles_for(M, N, K)) * int64_t(sizeof(double)) + 64;
}

void run(const Problem& p, std::byte* scratch) {
  if (p.batch <= 0 || p.M <= 0 || p.N <= 0) {
    if (p.amax) *p.amax = 0.0;
    return;
  }
  const Isa& isa = pick();
  const Tiles tl = tiles_for(p.M, p.N, p.K);
  const int64_t per_slot = slot_doubles(tl);
  auto addr = reinterpret_cast<uintptr_t>(scratch);
  double* base = reinterpret_cast<double*>(scratch + ((64 - addr % 64) % 64));
  const int64_t tm = (p.M + kMC - 1) / kMC, tn = (p.N + kNC - 1) / kNC;
  const int64_t total = p.batch * tm * tn;
  const bool par = ku::parallel_worth(ku::work_of({p.batch, p.M, p.N, std::max<int64_t>(p.K, 1)}));
  const int threads = par ? int(std::min<int64_t>({int64_t(omp_get_max_threads()), int64_t(slot_count()), total})) : 1;
  double amax = 0.0;
#pragma omp parallel num_threads(threads) if (par)
  {
    double* slot = base + int64_t(omp_get_thread_num()) * per_slot;
    double local = 0.0;
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < total; ++t) {
      const int64_t b = t / (tm * tn), r = t % (tm * tn);
      run_tile(p, isa, tl, b, (r / tn) * kMC, (r % tn) * kNC, slot, local);
    }
#pragma omp critical(opendnn_ref_gemm_amax)
    if (std::isnan(local) || local > amax) amax = local;
  }
  if (p.amax) *p.amax = amax;
}

}  // namespace opendnn::ref::gemm
