// SPDX-License-Identifier: Apache-2.0
// Plans of the cuda engine for a MATMUL_FP8 alone (e4m3, bf16 C, optionally amax_C), or a MATMUL followed by an
// optional chain of POINTWISE nodes that the GEMM epilogue absorbs:  C = act(alpha * (A · B) + bias + residual)  where, in graph order,
//   MUL by a pass-by-value scalar   (first, before anything else)
//   ADD bias  [.., 1, N]            (before the activation)
//   ADD residual of C's shape       (before the activation, or after it when there is none)
//   RELU / GELU / GELU_APPROX_TANH / SWISH   (at most one)
//   MUL by a graph input `up` of C's shape, after the activation and last (gated: SwiGLU's
//     silu(x W_gate) * up; no residual then)
// C has A's type, or FLOAT for 16-bit A (then a residual is FLOAT too; the bias keeps A's type).
// Intermediate tensors must be virtual. Batch dims collapse to one strided batch (CUTLASS's L).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "engines/cuda/cuda_engine.h"
#include "engines/cuda/gemm/gemm_kernels.h"
#include "engines/cuda/scalar_source.h"

namespace opendnn::cuda {
namespace {

using gemm::Act;

constexpr int64_t kBase = 1000;

struct Fused {
  gemm::Args args;  // shapes, strides and epilogue; pointers filled at execute
  ScalarSource alpha{1.0, -1, DataType::FLOAT};
  int64_t sa = -1, sb = -1, sd = -1, sbias = -1, sres = -1, samax = -1;
  int64_t sscale[3] = {-1, -1, -1};  // MATMUL_FP8's descale_A, descale_B, scale_C
};

// The node of `g` other than `self` that reads `t`, or null; `count` gets how many do.
const Node* consumer(const Graph& g, const TensorPtr& t, int& count) {
  const Node* found = nullptr;
  count = 0;
  for (const auto& n : g.nodes())
    for (const auto& in : n->inputs())
      if (in == t) {
        ++count;
        found = n.get();
      }
  return found;
}

// The single stride that walks C's flattened batch for an operand whose batch dims broadcast to
// `cb`; false when its batch dims do not collapse to one stride.
bool batch_stride(const TensorPtr& t, const std::vector<int64_t>& cb, int64_t& out) {
  const auto& d = t->get_dim();
  const auto& s = t->get_stride();
  const size_t nb = cb.size();
  out = 0;
  bool found = false;
  int64_t inner = 1;  // product of C's batch dims inside dim i
  for (size_t k = nb; k-- > 0;) {
    const int64_t st = d[k] == 1 ? 0 : s[k];
    if (cb[k] != 1) {
      if (!found && st != 0) {
        if (st % inner != 0) return false;
        out = st / inner;
        found = true;
      }
      if (st != out * inner) return false;
    }
    inner *= cb[k];
  }
  return true;
}

bool is_bias(const TensorPtr& t, int64_t n) {
  const auto& d = t->get_dim();
  if (d.empty() || d.back() != n || t->volume() != n) return false;
  return t->get_stride().back() == 1 || n == 1;
}

std::string act_of(const Node& n, Act& act, float& swish_beta) {
  switch (n.pointwise_mode()) {
    case PointwiseMode::RELU_FWD:
      if ((n.has("relu_lower_clip") && n.attr_float("relu_lower_clip") != 0.0) ||
          (n.has("relu_upper_clip") && !std::isinf(n.attr_float("relu_upper_clip"))) ||
          (n.has("relu_lower_clip_slope") && n.attr_float("relu_lower_clip_slope") != 0.0))
        return "relu with clips or slope is not fused";
      act = Act::RELU;
      return "";
    case PointwiseMode::GELU_FWD: act = Act::GELU_ERF; return "";
    case PointwiseMode::GELU_APPROX_TANH_FWD: act = Act::GELU_TANH; return "";
    case PointwiseMode::SWISH_FWD:
      act = Act::SILU;
      swish_beta = n.has("swish_beta") ? float(n.attr_float("swish_beta")) : 1.0f;
      return "";
    default: return "pointwise mode " + std::string(to_string(n.pointwise_mode())) + " is not a fusable epilogue";
  }
}

// MATMUL_FP8 runs alone: e4m3 A and B, its three scalars in device memory, amax_C not asked for.
std::string match_fp8(const Graph& g, const Node& mm, Fused& f) {
  if (g.nodes().size() != 1) return "not supported: epilogue nodes after MATMUL_FP8";
  for (const char* p : {"A", "B"})
    if (mm.in(p)->get_data_type() != DataType::FP8_E4M3) return std::string("not supported: fp8 ") + p + " other than FP8_E4M3";
  if (const TensorPtr& amax = mm.out("amax_C"); !amax->get_is_virtual()) {
    if (amax->get_data_type() != DataType::FLOAT || amax->volume() != 1) return "amax_C must be one FLOAT";
    f.samax = slot_of(g, amax);
    if (f.samax < 0) return "amax_C needs memory in the variant pack";
    f.args.epi = gemm::Epi::AMAX;
  }
  const char* scales[3] = {"descale_A", "descale_B", "scale_C"};
  for (int i = 0; i < 3; ++i) {
    const TensorPtr& t = mm.in(scales[i]);
    f.sscale[i] = slot_of(g, t);
    if (t->get_is_pass_by_value() || f.sscale[i] < 0) return std::string(scales[i]) + " must be a tensor in device memory";
  }
  f.args.type = gemm::Elem::FP8_E4M3;
  return "";
}

// Fills `f` from the graph; returns "" or the reason to decline.
std::string match(const Graph& g, Fused& f) {
  const Node* mm = nullptr;
  for (const auto& n : g.nodes()) {
    if (n->kind() == OpKind::MATMUL || n->kind() == OpKind::MATMUL_FP8) {
      if (mm) return "runs graphs with one MATMUL only";
      mm = n.get();
    } else if (n->kind() != OpKind::POINTWISE) {
      return "runs MATMUL graphs with a pointwise epilogue only";
    }
  }
  if (!mm) return "no MATMUL node";
  if (mm->kind() == OpKind::MATMUL)
    for (const char* p : {"M_override", "N_override", "K_override"})
      if (mm->in(p)) return std::string("not supported: ") + p;
  const TensorPtr& A = mm->in("A");
  const TensorPtr& B = mm->in("B");
  const bool fp8 = mm->kind() == OpKind::MATMUL_FP8;
  const DataType T = fp8 ? DataType::BFLOAT16 : A->get_data_type();  // the output's (and epilogue's) type
  gemm::Args& a = f.args;
  if (fp8) {
    if (std::string why = match_fp8(g, *mm, f); !why.empty()) return why;
  } else {
    if (T != DataType::BFLOAT16 && T != DataType::HALF) return "A must be BFLOAT16 or HALF";
    if (B->get_data_type() != T) return "B must have A's data type";
    a.type = T == DataType::BFLOAT16 ? gemm::Elem::BF16 : gemm::Elem::FP16;
  }

  // Walk the epilogue chain from C to the graph output.
  TensorPtr cur = mm->out("C");
  size_t chained = 1;
  bool bias = false, res = false, scaled = false;
  TensorPtr residual;
  while (true) {
    int readers = 0;
    const Node* n = consumer(g, cur, readers);
    if (!n) break;
    if (!cur->get_is_virtual()) return "the GEMM result feeds the epilogue and must be virtual when it is not the output";
    if (readers != 1) return "an intermediate epilogue tensor has more than one reader";
    if (n->kind() != OpKind::POINTWISE) return "the epilogue holds a non-pointwise node";
    const PointwiseMode m = n->pointwise_mode();
    const TensorPtr& out = n->out("OUT_0");
    if (m == PointwiseMode::ADD || m == PointwiseMode::MUL) {
      const TensorPtr& other = n->in("IN_0") == cur ? n->in("IN_1") : n->in("IN_0");
      if (other == cur) return "the epilogue reads the GEMM result twice";
      if (out->get_dim() != cur->get_dim()) return "an epilogue input broadcasts the output";
      if (a.epi == gemm::Epi::GATED) return "nothing is fused after the gating MUL";
      if (m == PointwiseMode::MUL && a.act.act != Act::NONE && other->get_dim() == cur->get_dim()) {
        if (res) return "a gated MUL after a residual ADD is not fused";
        residual = other;  // the epilogue reads `up` where it would read a residual
        a.epi = gemm::Epi::GATED;
      } else if (m == PointwiseMode::MUL) {
        if (scaled || bias || res || a.act.act != Act::NONE) return "a scalar MUL is fused only right after the MATMUL";
        if (other->volume() != 1 || !other->get_is_pass_by_value()) return "MUL must take a pass-by-value scalar";
        f.alpha = ScalarSource::of(g, other);
        scaled = true;
      } else if (other->get_dim() == cur->get_dim()) {
        if (res) return "two residual ADDs";
        if (a.act.act != Act::NONE) return "a residual ADD after the activation is not fused";
        residual = other;
        res = true;
      } else if (is_bias(other, cur->get_dim().back())) {
        if (bias) return "two bias ADDs";
        if (a.act.act != Act::NONE) return "a bias ADD after the activation is not fused";
        if (other->get_data_type() != T) return "bias must have A's data type";
        f.sbias = slot_of(g, other);
        if (f.sbias < 0) return "bias must be a graph input";
        bias = true;
      } else {
        return "ADD takes neither a bias [..., N] nor a residual of the output's shape";
      }
    } else {
      if (a.act.act != Act::NONE) return "two activations";
      if (std::string why = act_of(*n, a.act.act, a.act.swish_beta); !why.empty()) return why;
    }
    cur = out;
    ++chained;
  }
  if (chained != g.nodes().size()) return "the graph holds nodes outside the MATMUL's epilogue chain";
  const TensorPtr& D = cur;
  if (D->get_is_virtual()) return "the output must not be virtual";
  if (D->get_data_type() == DataType::FLOAT && !fp8) {
    a.out = gemm::Out::FP32;
  } else if (D->get_data_type() != T) {
    return fp8 ? "not supported: the fp8 GEMM writes BFLOAT16 C only"
               : "not supported: the output must have A's data type or be FLOAT";
  }

  // Shapes and strides.
  const auto& cd = D->get_dim();
  const size_t r = cd.size();
  const auto& ad = A->get_dim();
  a.M = cd[r - 2];
  a.N = cd[r - 1];
  a.K = ad[r - 1];
  std::vector<int64_t> cb(cd.begin(), cd.end() - 2);
  a.L = 1;
  for (int64_t v : cb) a.L *= v;
  const auto& as = A->get_stride();
  const auto& bs = B->get_stride();
  const auto& ds = D->get_stride();
  if (as[r - 1] != 1 && a.K > 1) return "not supported: A must be row-major (K contiguous)";
  a.lda = a.M > 1 ? as[r - 2] : a.K;
  if (bs[r - 1] == 1 || a.N == 1) {
    a.b_k_major = false;
    a.ldb = a.K > 1 ? bs[r - 2] : a.N;
  } else if (bs[r - 2] == 1 || a.K == 1) {
    a.b_k_major = true;
    a.ldb = bs[r - 1];
  } else {
    return "B must have its K or its N dim contiguous";
  }
  if (ds[r - 1] != 1 && a.N > 1) return "the output must be row-major (N contiguous)";
  a.ldd = a.M > 1 ? ds[r - 2] : a.N;
  if (!batch_stride(A, cb, a.batch_a) || !batch_stride(B, cb, a.batch_b) || !batch_stride(D, cb, a.batch_d))
    return "batch dims of A, B and the output must collapse to one stride";
  if (res || a.epi == gemm::Epi::GATED) {
    // The residual, or the gated MUL's `up`: the epilogue's source operand, of the output's type.
    const char* what = res ? "the residual" : "the gating tensor";
    if (residual->get_data_type() != D->get_data_type()) return std::string(what) + " must have the output's data type";
    f.sres = slot_of(g, residual);
    if (f.sres < 0) return std::string(what) + " must be a graph input";
    const auto& rs = residual->get_stride();
    if (rs[r - 1] != 1 && a.N > 1) return std::string(what) + " must be row-major (N contiguous)";
    a.ldr = a.M > 1 ? rs[r - 2] : a.N;
    if (!batch_stride(residual, cb, a.batch_r)) return std::string("batch dims of ") + what + " must collapse to one stride";
    a.residual_given = true;
    a.beta = 1.0f;
  }
  // A weight shared by every batch: the batch folds into M when A, C and the residual stack densely.
  if (a.L > 1 && a.batch_b == 0 && a.batch_a == a.M * a.lda && a.batch_d == a.M * a.ldd &&
      (!a.residual_given || a.batch_r == a.M * a.ldr)) {
    a.M *= a.L;
    a.L = 1;
    a.batch_a = a.batch_d = a.batch_r = 0;
  }
  if (a.L == 1) a.batch_a = a.batch_b = a.batch_d = a.batch_r = 0;
  if (const char* why = gemm::check(a); *why) return why;
  f.sa = slot_of(g, A);
  f.sb = slot_of(g, B);
  f.sd = slot_of(g, D);
  if (f.sa < 0 || f.sb < 0 || f.sd < 0) return "A, B and the output need memory in the variant pack";
  return "";
}

// The tile and cluster shapes of the kernels (gemm_sm90.cuh, Schedule).
int64_t tile_m(const gemm::Args& a) {
  if (a.config == gemm::Config::COOP_M256) return 256;
  const bool fp8_pingpong = a.config == gemm::Config::PINGPONG && a.type == gemm::Elem::FP8_E4M3;
  return fp8_pingpong || a.config == gemm::Config::PINGPONG_64X256 ? 64 : 128;
}
int64_t tile_n(const gemm::Args& a) {
  if (a.config == gemm::Config::PINGPONG || a.config == gemm::Config::COOP_M256) return 128;
  return a.type == gemm::Elem::FP8_E4M3 && a.config == gemm::Config::COOP ? 128 : 256;
}
constexpr int64_t kClusterM = 2, kClusterN = 1;  // every kernel's cluster
// The opt-in candidates of session 5 that remain (gemm_kernels.h): pingpong 64x256 (on a par with pingpong
// 128x128 in gemm_sweep.json) and fp8 pingpong.
bool candidate(const gemm::Args& a) {
  return a.config == gemm::Config::PINGPONG_64X256 || (a.config == gemm::Config::PINGPONG && a.type == gemm::Elem::FP8_E4M3);
}

int64_t ceil_to(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Achieved dense rates (flops per us) on the H200 (bench/results/gemm.json, plans_* rows, M = 8192):
// PINGPONG wins while N or K is at most ~8k (721 vs 630 TFLOP/s at N=14336 K=4096, 756 vs 682 at N=4096
// K=11008, 715 vs 606 with bias+GELU), COOP once both are >= 11008 (657 vs 581 at 11008x11008, 692 vs
// 660 at 14336x14336); fp8 COOP ~1050, FAST_ACCUM ~1300.
// The unmeasured candidates rank below every measured plan of their type until a run says otherwise.
double rate(const gemm::Args& a) {
  if (a.type == gemm::Elem::FP8_E4M3)
    return a.config == gemm::Config::FAST_ACCUM ? 1300e6 : candidate(a) ? 1000e6 : 1050e6;
  if (candidate(a)) return 600e6;
  const bool long_and_wide = a.N >= 10000 && a.K >= 10000;
  if (a.config == gemm::Config::PINGPONG) return long_and_wide ? 620e6 : 730e6;
  // COOP_M256 is unmeasured: ranked just below COOP until a run says otherwise.
  if (a.config == gemm::Config::COOP_M256) return long_and_wide ? 665e6 : 675e6;
  return long_and_wide ? 670e6 : 680e6;
}

double estimate_us(const gemm::Args& a) {
  const int64_t tn = tile_n(a);
  const double mt = double(ceil_to(a.M, tile_m(a))), nt = double(ceil_to(a.N, tn));
  const double flops = 2.0 * mt * nt * double(a.K) * double(a.L);
  const double out_bytes = (a.out == gemm::Out::FP32 ? 4.0 : 2.0) * (a.residual_given ? 2 : 1);
  const double bytes =
      double(a.L) * (2.0 * (double(a.M) * a.K + double(a.K) * a.N) + out_bytes * double(a.M) * double(a.N));
  return 5.0 + std::max(flops / rate(a), bytes / 3.3e6);  // roofline with ~3.3 TB/s; launch
}

// The scheduler's swizzle (CUTLASS max_swizzle_size): groups of `s` tiles along the minor dimension,
// so a wave of CTAs shares its A and B panels in L2. CUTLASS rounds both tile counts up to the
// group size (x the 2x1 cluster) and runs the padding tiles as real work, so a swizzle is taken only
// where that adds no wave, and only for problems of several waves (smaller ones fit in L2 anyway).
// OPENDNN_GEMM_SWIZZLE=1|2|4|8 overrides it (for A/B runs in bench/gemm.py).
int64_t padded_waves(const gemm::Args& a, int sm_count, int s) {
  const int64_t tm = (a.M + tile_m(a) - 1) / tile_m(a), tn = (a.N + tile_n(a) - 1) / tile_n(a);
  const int64_t padded = ceil_to(tm, kClusterM * s) * ceil_to(tn, kClusterN * s) * a.L;
  return (padded + sm_count - 1) / sm_count;
}

int default_swizzle(const gemm::Args& a, int sm_count) {
  const int64_t waves = padded_waves(a, sm_count, 1);
  if (waves < 3) return 1;
  for (int s : {8, 4, 2})
    if (padded_waves(a, sm_count, s) == waves) return s;
  return 1;
}

// OPENDNN_GEMM_KNOBS=model (UNVERIFIED for speed; every swizzle and raster order passed the knob test): the
// raster order as well, by the bytes a wave reads. A wave of W CTAs walks along the major dimension in bands
// of g = swizzle x cluster tiles of the minor one, so it reads about g panels of the minor operand and W / g
// of the major one (a panel: tile rows x K). CUTLASS's heuristic raster walks along M whenever N has more
// tiles, so at N = 11008 (86 pingpong tiles) and swizzle 2 a wave spans all 64 M tiles of A (64 panels)
// and 2 of B; along N the same swizzle reads 4 + 33. Fewest waves first (padding tiles run as real work),
// then fewest panel bytes.
void model_knobs(gemm::Args& a, int sm_count) {
  const double tm = double((a.M + tile_m(a) - 1) / tile_m(a)), tn = double((a.N + tile_n(a) - 1) / tile_n(a));
  const int64_t waves = padded_waves(a, sm_count, 1);
  double best = -1;
  for (gemm::Raster r : {gemm::Raster::ALONG_N, gemm::Raster::ALONG_M})
    for (int s : {1, 2, 4, 8}) {
      if (padded_waves(a, sm_count, s) != waves) continue;
      const bool along_n = r == gemm::Raster::ALONG_N;  // minor dimension M
      const double major = along_n ? tn : tm, minor = along_n ? tm : tn;
      const double g = std::min(minor, double(s * (along_n ? kClusterM : kClusterN)));
      const double pmajor = double(along_n ? tile_n(a) : tile_m(a)), pminor = double(along_n ? tile_m(a) : tile_n(a));
      const double w = std::min(double(sm_count), tm * tn * double(a.L));
      // Inside one band, or across w / major bands when a band holds fewer tiles than the wave.
      const double bytes = w <= g * major ? g * pminor + std::ceil(w / g) * pmajor
                                          : std::min(std::ceil(w / major), minor) * pminor + major * pmajor;
      if (best < 0 || bytes < best) {
        best = bytes;
        a.swizzle = s;
        a.raster = r;
      }
    }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Knobs: ("swizzle", 1|2|4|8), ("raster", gemm::Raster): default_swizzle and CUTLASS's heuristic raster
// (along M when N has more tiles than M, else along N), or model_knobs under OPENDNN_GEMM_KNOBS=model.
// OPENDNN_GEMM_SWIZZLE and OPENDNN_GEMM_RASTER=m|n|h (along M, along N, heuristic) override either.
void choose_knobs(gemm::Args& a, int sm_count) {
  const char* knobs = std::getenv("OPENDNN_GEMM_KNOBS");
  a.swizzle = default_swizzle(a, sm_count);
  a.raster = gemm::Raster::HEURISTIC;
  if (knobs && std::string(knobs) == "model") model_knobs(a, sm_count);
  a.swizzle = env_int("OPENDNN_GEMM_SWIZZLE", a.swizzle);
  if (a.swizzle != 1 && a.swizzle != 2 && a.swizzle != 4 && a.swizzle != 8) a.swizzle = 1;
  if (const char* r = std::getenv("OPENDNN_GEMM_RASTER"); r && *r)
    a.raster = *r == 'm' || *r == 'M'   ? gemm::Raster::ALONG_M
               : *r == 'n' || *r == 'N' ? gemm::Raster::ALONG_N
                                        : gemm::Raster::HEURISTIC;
  // OPENDNN_GEMM_FP8_PROMOTION=8|16 promotes the fp8 accumulator every 256 or 512 k instead of 128 (opt-in: the
  // accuracy trade is the user's; CudaGemm.Fp8E4m3PromotionInterval passes, gemm_sweep: 0.945x _scaled_mm at 8). CUTLASS's promotion waits for every wgmma in flight (fp8_accumulation.hpp), so the
  // tensor pipe drains once a k-tile at the default: the exact plans' gap to fast accumulation (1.06 vs 0.81 ms
  // at 8192^3).
  if (a.type == gemm::Elem::FP8_E4M3 && a.config != gemm::Config::FAST_ACCUM) {
    const int p = env_int("OPENDNN_GEMM_FP8_PROMOTION", 4);
    a.fp8_promotion = p == 8 || p == 16 ? p : 4;
  }
}

// "" or the knob value the kernels do not take (a candidate from create_execution_plan or a serialized plan).
std::string apply_knobs(gemm::Args& a, const PlanCandidate& c) {
  for (const auto& [k, v] : c.knobs) {
    const bool ok = k == "swizzle" ? (v == 1 || v == 2 || v == 4 || v == 8)
                    : k == "raster" ? (v >= 0 && v <= 2)
                    : k == "promotion" ? (v == 4 || v == 8 || v == 16)
                                       : true;
    if (!ok) return "knob " + k + " = " + std::to_string(v) + " is not a value the kernels take";
    if (k == "swizzle") a.swizzle = int(v);
    if (k == "raster") a.raster = gemm::Raster(v);
    if (k == "promotion") a.fp8_promotion = int(v);
  }
  return {};
}

class GemmPlan : public Plan {
 public:
  GemmPlan(Fused f, int sm_count, int64_t workspace) : f_(f), sm_(sm_count), ws_(workspace) {}
  Status execute(void* const* slots, void* workspace, void* stream) override {
    gemm::Args a = f_.args;
    a.a = slots[f_.sa];
    a.b = slots[f_.sb];
    a.d = slots[f_.sd];
    a.amax = f_.samax >= 0 ? static_cast<float*>(slots[f_.samax]) : nullptr;
    a.bias = f_.sbias >= 0 ? slots[f_.sbias] : nullptr;
    a.residual = f_.sres >= 0 ? slots[f_.sres] : nullptr;
    a.alpha = f_.alpha.read(slots);
    for (int i = 0; i < 3; ++i)
      if (f_.sscale[i] >= 0) a.scale[i] = static_cast<const float*>(slots[f_.sscale[i]]);
    // The plan's cache of launch parameters serves one call at a time: a call that finds it taken (a
    // concurrent execute of the same plan) builds its parameters in a cache of its own on the stack.
    std::unique_lock<std::mutex> lock(cache_mutex_, std::try_to_lock);
    gemm::LaunchCache own;
    if (const char* e = gemm::launch(a, workspace, sm_, stream, lock.owns_lock() ? cache_ : own))
      return {ErrorCode::CUDA_API_FAILED, std::string("cuda gemm: ") + e};
    return {};
  }
  int64_t workspace_size() const override { return ws_; }

 private:
  Fused f_;
  int sm_;
  int64_t ws_;
  gemm::LaunchCache cache_;
  std::mutex cache_mutex_;
};

int sm_count_of(const Target& t) { return t.sm_count > 0 ? t.sm_count : 132; }

std::string plan_name(const gemm::Args& a) {
  const char* type = a.type == gemm::Elem::FP8_E4M3 ? "e4m3" : a.type == gemm::Elem::BF16 ? "bf16" : "fp16";
  const bool pingpong = a.config == gemm::Config::PINGPONG || a.config == gemm::Config::PINGPONG_64X256;
  const char* kind = pingpong                                 ? "pingpong"
                     : a.config == gemm::Config::FAST_ACCUM ? "coop_fastacc"
                                                            : "coop";
  // The scheduler knobs too (_sw<swizzle>_r<h|m|n>), so a benchmark row says what ran.
  const char* raster = a.raster == gemm::Raster::ALONG_M ? "m" : a.raster == gemm::Raster::ALONG_N ? "n" : "h";
  const char* variant = a.epi == gemm::Epi::GATED ? "_swiglu" : a.epi == gemm::Epi::AMAX ? "_amax" : "";
  return "gemm_" + std::to_string(tile_m(a)) + "x" + std::to_string(tile_n(a)) + "x" +
         (a.type == gemm::Elem::FP8_E4M3 ? "128" : "64") + "_c" + std::to_string(kClusterM) + "x" +
         std::to_string(kClusterN) + "_" + kind + "_" + type +
         (a.out == gemm::Out::FP32 ? "_f32out" : "") + variant + (a.b_k_major ? "_bk" : "_bn") + "_sw" +
         std::to_string(a.swizzle) + "_r" + raster +
         (a.fp8_promotion != 4 ? "_p" + std::to_string(a.fp8_promotion) : "");
}

// Local index: 16 per configuration (8 of them), then type and B layout (the plain plans keep the indices
// they always had); the variants 128 apart (epilogue) and 384 (fp32 output), so the configuration is
// (index % 128) / 16. All below 2000, where the next family's indices start.
constexpr int64_t kConfigs = 8;
int64_t local_index(const gemm::Args& a) {
  return kBase + 16 * int64_t(a.config) + 2 * int64_t(a.type) + (a.b_k_major ? 1 : 0) + 16 * kConfigs * int64_t(a.epi) +
         48 * kConfigs * int64_t(a.out);
}

// PINGPONG passed tests/gpu/test_cuda_gemm.cpp on the H200 and is offered unless OPENDNN_GEMM_PINGPONG=0.
// FAST_ACCUM (fp8 without fp32 promotion of the accumulator, like torch._scaled_mm(use_fast_accum=True))
// also passed, but trades precision for speed, so the user asks for it: OPENDNN_GEMM_FP8_FAST=1.
// The SwiGLU epilogue, the fp32 output and fp8 amax_C passed their tests on the H200 (gemm_variants.json:
// SwiGLU 1.07x torch's separate kernels, fp32 out 1.19x matmul + .float(), amax 1.22x _scaled_mm + amax)
// and serve graphs nothing else took: offered unless OPENDNN_GEMM_SWIGLU/F32_OUT/FP8_AMAX=0. The 256x128
// tile passed too but ran slower than the 128x256 and pingpong ones: opt-in, OPENDNN_GEMM_M256=1.
// The session-5 candidates left are opt-in: OPENDNN_GEMM_PP64X256=1 and _FP8_PINGPONG=1 (bench/gemm.py switches
// them on for its plan sweep).
bool offered(const gemm::Args& a) {
  if (a.type == gemm::Elem::FP8_E4M3 && a.config == gemm::Config::PINGPONG)
    return env_int("OPENDNN_GEMM_FP8_PINGPONG", 0) == 1;
  if (a.epi == gemm::Epi::GATED && env_int("OPENDNN_GEMM_SWIGLU", 1) != 1) return false;
  if (a.epi == gemm::Epi::AMAX && env_int("OPENDNN_GEMM_FP8_AMAX", 1) != 1) return false;
  if (a.out == gemm::Out::FP32 && env_int("OPENDNN_GEMM_F32_OUT", 1) != 1) return false;
  switch (a.config) {
    case gemm::Config::PINGPONG: return env_int("OPENDNN_GEMM_PINGPONG", 1) == 1;
    case gemm::Config::FAST_ACCUM: return env_int("OPENDNN_GEMM_FP8_FAST", 0) == 1;
    case gemm::Config::COOP_M256: return env_int("OPENDNN_GEMM_M256", 0) == 1;
    case gemm::Config::PINGPONG_64X256: return env_int("OPENDNN_GEMM_PP64X256", 0) == 1;
    default: return true;
  }
}

void propose(const Graph& g, const Target& t, Proposal& out) {
  Fused f;
  if (std::string why = match(g, f); !why.empty()) {
    out.declines.push_back(why);
    return;
  }
  for (int64_t cfg = 0; cfg <= int64_t(gemm::Config::PINGPONG_64X256); ++cfg) {
    gemm::Args a = f.args;
    a.config = gemm::Config(cfg);
    if (!gemm::has_kernel(a) || !offered(a)) continue;
    choose_knobs(a, sm_count_of(t));
    PlanCandidate c;
    c.name = plan_name(a);
    c.local_index = local_index(a);
    c.estimated_us = estimate_us(a);
    c.knobs = {{"swizzle", a.swizzle}, {"raster", int64_t(a.raster)}, {"promotion", a.fp8_promotion}};
    c.workspace_bytes = gemm::workspace_bytes(a, sm_count_of(t));
    c.numerical_notes = {NumericalNote::TENSOR_CORE};  // wgmma
    // The tile scheduler's knobs take any of these values; the fp8 promotion interval 4, 8 or 16.
    c.knob_ranges = {{"swizzle", 1, 8, 1, {1, 2, 4, 8}},
                     {"raster", 0, 2, 1, {}},
                     {"promotion", 4, 16, 4, a.type == gemm::Elem::FP8_E4M3 ? std::vector<int64_t>{4, 8, 16}
                                                                             : std::vector<int64_t>{a.fp8_promotion}}};
    out.plans.push_back(c);
  }
  if (out.plans.empty())
    out.declines.push_back(
        "no kernel is instantiated (or offered: see the OPENDNN_GEMM_* switches) for this type, layout and epilogue");
}

Status build(const Graph& g, const Target& t, const PlanCandidate& c, std::unique_ptr<Plan>& out) {
  Fused f;
  if (std::string why = match(g, f); !why.empty())
    return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda gemm: " + why};
  f.args.config = gemm::Config((c.local_index - kBase) % (16 * kConfigs) / 16);
  if (std::string bad = apply_knobs(f.args, c); !bad.empty())
    return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda gemm: " + bad};
  if (!gemm::has_kernel(f.args) || local_index(f.args) != c.local_index)
    return {ErrorCode::GRAPH_EXECUTION_PLAN_CREATION_FAILED, "cuda gemm: the candidate does not fit this graph"};
  const int sm = sm_count_of(t);
  out = std::make_unique<GemmPlan>(f, sm, gemm::workspace_bytes(f.args, sm));
  return {};
}

static_assert(int64_t(gemm::Config::PINGPONG_64X256) < kConfigs, "a configuration's index would reach the next one's");

const Family kGemm = {"gemm", kBase, propose, build};

}  // namespace

const Family& gemm_family() { return kGemm; }

}  // namespace opendnn::cuda
