// SPDX-License-Identifier: Apache-2.0
// Reference kernels for RNG, RESAMPLE, BLOCK_SCALE_QUANTIZE/DEQUANTIZE, MOE_GROUPED_MATMUL(_BWD) and
// ROPE(_BWD). Layouts and attributes: src/ops/misc.cpp. Everything is computed in double and rounded
// once into each output.
//
// RNG (Philox4x32-10, src/common/philox.h): element i (logical row-major index of Y) of a tensor with
//   seed s (tensor `seed`, else attribute seed_value) and offset o (tensor `offset`, else 0) uses word
//   w = philox_word(s, 0, o + i), u = (w + 0.5) / 2^32 in (0, 1):
//   BERNOULLI y = u < p ? 1 : 0;  UNIFORM y = min + (max - min) * u;
//   NORMAL uses words o + 2i and o + 2i + 1 (Box-Muller, cosine branch): y = mean + stddev * z.
// RESAMPLE: pooling windows start at o*stride - pre. Padded positions: ZERO_PAD reads 0, NEG_INF_PAD
//   reads -inf, EDGE_VAL_PAD reads the nearest edge element. MAXPOOL: first maximum in row-major window
//   order (Index = its row-major position in the window, padded positions included); AVGPOOL_INCLUDE_
//   PADDING divides by the window volume, AVGPOOL_EXCLUDE_PADDING by the in-bounds count.
//   NEAREST: src = floor(o * in / out). BILINEAR (multi-linear over every spatial dim, half-pixel
//   centres, align_corners = false): src = max(0, (o + 0.5) * in / out - 0.5), neighbours clamped.
// BLOCK_SCALE_QUANTIZE (MX-style): per block of block_size elements along axis, amax = max |x|;
//   scale FP8_E8M0: s = 2^ceil(log2(amax / max_Y)) (never underestimates, so no element overflows);
//   FP8_E4M3: s = RNE_e4m3(amax / max_Y); FLOAT: s = amax / max_Y; amax = 0 gives s = 1.
//   max_Y = 448 (E4M3), 57344 (E5M2), 6 (E2M1). Y = RNE_Y(x / s) (saturating for E4M3/E2M1).
//   transpose: Y[..., j, i] and scale[..., j, i] hold the values of position (..., i, j).
// BLOCK_SCALE_DEQUANTIZE: Y = X * scale[block]. is_negative_scale is not supported (check declines).
// MOE_GROUPED_MATMUL: routed row r belongs to expert e with off[e] <= r < off[e+1] (last: up to R);
//   output[orow(r)] = token[irow(r)] · weight[e]; irow = token_index[r] for GATHER, else r; orow =
//   token_index[r] * top_k + token_ks[r] for SCATTER, else r. Rows before off[0] (and, for SCATTER,
//   output rows nobody sends to) are 0.
// MOE_GROUPED_MATMUL_BWD: dtoken[irow] += doutput[orow] · weight[e]^T (sums over routed rows that read
//   the same token, GATHER); dweight[e] = sum over its rows of token[irow]^T · doutput[orow].
// ROPE: y0 = x0 cos - x1 sin, y1 = x0 sin + x1 cos for pairs (i, i + rd/2) or (2i, 2i+1); dims past
//   rotary_dim copy through. ROPE_BWD rotates by -angle: dx0 = dy0 cos + dy1 sin, dx1 = dy1 cos - dy0 sin.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/philox.h"
#include "engines/reference/gemm.h"
#include "engines/reference/kern_util.h"

namespace opendnn::ref {
namespace {

using Dims = std::vector<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();

Status check_rank(const Node& n) { return ku::check_rank(n); }

// ---------------------------------------------------------------- RNG
Status run_rng(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "Y");
  if (!y) return {};
  const bool has_seed_tensor = ku::in(n, args, "seed") || (n.in("seed") && n.in("seed")->get_is_pass_by_value());
  if (!has_seed_tensor && !n.has("seed_value"))
    return n.fail(ErrorCode::INVALID_VARIANT_PACK, "RNG needs a seed (tensor seed or attribute seed_value)");
  const uint64_t seed = uint64_t(has_seed_tensor ? ku::int_scalar(n, args, "seed", 0) : n.attr_int("seed_value"));
  const uint64_t offset = uint64_t(ku::int_scalar(n, args, "offset", 0));
  const std::string& dist = n.attr_str("distribution");
  const int kind = dist == "UNIFORM" ? 1 : dist == "NORMAL" ? 2 : 0;
  const double p = n.attr_float("bernoulli_probability");
  const double lo = n.attr_float("uniform_min"), hi = n.attr_float("uniform_max");
  const double mean = n.attr_float("normal_mean"), sd = n.attr_float("normal_stddev");
  const int64_t total = y->volume();
  const size_t r = y->rank();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(total))
  for (int64_t i = 0; i < total; ++i) {
    int64_t idx[ku::kMaxRank] = {};
    ku::unravel(i, y->dims.data(), r, idx);
    double v;
    if (kind == 2) {
      const uint64_t w = offset + 2 * uint64_t(i);
      v = mean + sd * philox_normal(philox_word(seed, 0, w), philox_word(seed, 0, w + 1));
    } else {
      const double u = philox_uniform(philox_word(seed, 0, offset + uint64_t(i)));
      v = kind == 1 ? lo + (hi - lo) * u : (u < p ? 1.0 : 0.0);
    }
    y->set(ku::dot(idx, y->strides), v);
  }
  return {};
}

// ---------------------------------------------------------------- RESAMPLE
Dims attr_or(const Node& n, const char* name, size_t count, const Dims& dflt) {
  const Dims& v = n.attr_ints(name);
  return v.size() == count ? v : dflt;
}

Status run_resample(const Node& n, const Args& args) {
  const View* y = ku::out(n, args, "Y");
  const View* x = ku::in(n, args, "X");
  const View* index = ku::out(n, args, "Index");
  if (!y) return {};
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  const std::string& mode = n.attr_str("resample_mode");
  const std::string& pad_mode = n.attr_str("padding_mode");
  const size_t ns = x->rank() - 2;
  const Dims in_sp(x->dims.begin() + 2, x->dims.end()), out_sp(y->dims.begin() + 2, y->dims.end());
  const Dims window = attr_or(n, "window", ns, Dims(ns, 1));
  const Dims stride = attr_or(n, "stride", ns, window);
  const Dims pre = attr_or(n, "pre_padding", ns, Dims(ns, 0));
  const bool want_index = index && n.attr_bool("generate_index") && mode == "MAXPOOL";
  const int64_t wvol = ku::volume(window);
  const int64_t total = y->volume();
  const size_t r = y->rank();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({total, wvol})))
  for (int64_t lin = 0; lin < total; ++lin) {
    int64_t yi[ku::kMaxRank] = {}, wi[ku::kMaxRank] = {}, xi[ku::kMaxRank] = {};
    ku::unravel(lin, y->dims.data(), r, yi);
    xi[0] = yi[0];
    xi[1] = yi[1];
    double out = 0.0;
    int64_t best_idx = 0;
    if (mode == "NEAREST") {
      for (size_t d = 0; d < ns; ++d) xi[2 + d] = std::min(in_sp[d] - 1, yi[2 + d] * in_sp[d] / out_sp[d]);
      out = x->get(ku::dot(xi, x->strides));
    } else if (mode == "BILINEAR") {
      int64_t lo[ku::kMaxRank] = {}, hi[ku::kMaxRank] = {};
      double frac[ku::kMaxRank] = {};
      for (size_t d = 0; d < ns; ++d) {
        double src = std::max(0.0, (double(yi[2 + d]) + 0.5) * double(in_sp[d]) / double(out_sp[d]) - 0.5);
        lo[d] = std::min(in_sp[d] - 1, int64_t(std::floor(src)));
        hi[d] = std::min(in_sp[d] - 1, lo[d] + 1);
        frac[d] = src - double(lo[d]);
      }
      for (int64_t corner = 0; corner < (int64_t(1) << ns); ++corner) {
        double wgt = 1.0;
        for (size_t d = 0; d < ns; ++d) {
          const bool up = (corner >> d) & 1;
          xi[2 + d] = up ? hi[d] : lo[d];
          wgt *= up ? frac[d] : 1.0 - frac[d];
        }
        if (wgt != 0.0) out += wgt * x->get(ku::dot(xi, x->strides));
      }
    } else {
      const bool is_max = mode == "MAXPOOL";
      double acc = is_max ? -kInf : 0.0;
      int64_t count = 0;
      bool first = true;
      for (int64_t w = 0; w < wvol; ++w) {
        ku::unravel(w, window.data(), ns, wi);
        bool inside = true;
        for (size_t d = 0; d < ns; ++d) {
          int64_t p = yi[2 + d] * stride[d] - pre[d] + wi[d];
          if (p < 0 || p >= in_sp[d]) {
            inside = false;
            if (pad_mode == "EDGE_VAL_PAD") p = std::clamp<int64_t>(p, 0, in_sp[d] - 1);
          }
          xi[2 + d] = p;
        }
        double v;
        if (inside || pad_mode == "EDGE_VAL_PAD")
          v = x->get(ku::dot(xi, x->strides));
        else
          v = pad_mode == "NEG_INF_PAD" ? -kInf : 0.0;
        if (inside) ++count;
        if (is_max) {
          if (first || v > acc || (std::isnan(v) && !std::isnan(acc))) {
            acc = v;
            best_idx = w;
          }
          first = false;
        } else {
          acc += v;
        }
      }
      if (is_max)
        out = acc;
      else if (mode == "AVGPOOL_INCLUDE_PADDING")
        out = acc / double(wvol);
      else
        out = count ? acc / double(count) : 0.0;
    }
    y->set(ku::dot(yi, y->strides), out);
    if (want_index) index->set(ku::dot(yi, index->strides), double(best_idx));
  }
  return {};
}

// ---------------------------------------------------------------- BLOCK SCALE
double max_of(DataType t) {
  switch (t) {
    case DataType::FP8_E4M3: return 448.0;
    case DataType::FP8_E5M2: return 57344.0;
    case DataType::FP4_E2M1: return 6.0;
    default: return 1.0;
  }
}

int64_t axis_of(const Node& n, size_t rank) {
  int64_t a = n.has("axis") ? n.attr_int("axis") : int64_t(rank) - 1;
  return a < 0 ? a + int64_t(rank) : a;
}

// Offset in a (possibly transposed) view of logical position idx of X's shape.
int64_t tr_offset(const View& v, const int64_t* idx, bool transpose) {
  const size_t r = v.rank();
  int64_t o = 0;
  for (size_t i = 0; i < r; ++i) {
    size_t j = i;
    if (transpose && i + 2 >= r) j = (i == r - 1) ? r - 2 : r - 1;  // idx[i] lands on axis j
    o += idx[i] * v.strides[j];
  }
  return o;
}

Status check_quant(const Node& n) {
  OPENDNN_RETURN_IF_ERROR(ku::check_rank(n));
  if (n.kind() == OpKind::BLOCK_SCALE_DEQUANTIZE && n.attr_bool("is_negative_scale"))
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "the reference engine does not implement is_negative_scale");
  return {};
}

Status run_quantize(const Node& n, const Args& args) {
  const View* x = ku::in(n, args, "X");
  const View* y = ku::out(n, args, "Y");
  const View* sc = ku::out(n, args, "scale");
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X needs data");
  if (!y && !sc) return {};
  const size_t r = x->rank();
  const int64_t axis = axis_of(n, r);
  const int64_t bs = n.attr_int("block_size");
  const bool tr = n.attr_bool("transpose");
  const DataType yt = y ? y->dtype : DataType::FP8_E4M3;
  const DataType st = sc ? sc->dtype : DataType::FP8_E8M0;
  const double ymax = max_of(yt);
  Dims bdims = x->dims;  // the block grid
  bdims[size_t(axis)] /= bs;
  const int64_t nblocks = ku::volume(bdims);
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({nblocks, bs})))
  for (int64_t b = 0; b < nblocks; ++b) {
    int64_t idx[ku::kMaxRank] = {};
    ku::unravel(b, bdims.data(), r, idx);
    const int64_t first = idx[axis] * bs;
    double amax = 0.0;
    for (int64_t e = 0; e < bs; ++e) {
      idx[axis] = first + e;
      double a = std::fabs(x->get(ku::dot(idx, x->strides)));
      if (std::isnan(a) || a > amax) amax = a;
    }
    double s;
    if (amax == 0.0)
      s = 1.0;
    else if (st == DataType::FP8_E8M0)
      s = fp8_e8m0_to_double(double_to_fp8_e8m0(amax / ymax));
    else
      s = round_to(st, amax / ymax);
    if (s == 0.0) s = 1.0;  // a scale that underflowed its type cannot divide
    if (sc) {
      idx[axis] = first / bs;
      sc->set(tr_offset(*sc, idx, tr), s);
    }
    if (y)
      for (int64_t e = 0; e < bs; ++e) {
        idx[axis] = first + e;
        y->set(tr_offset(*y, idx, tr), x->get(ku::dot(idx, x->strides)) / s);
      }
  }
  return {};
}

Status run_dequantize(const Node& n, const Args& args) {
  const View* x = ku::in(n, args, "X");
  const View* sc = ku::in(n, args, "scale");
  const View* y = ku::out(n, args, "Y");
  if (!y) return {};
  if (!x || !sc) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X and scale need data");
  const size_t r = x->rank();
  const int64_t axis = axis_of(n, r);
  const int64_t bs = n.attr_int("block_size");
  const int64_t total = x->volume();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(total))
  for (int64_t lin = 0; lin < total; ++lin) {
    int64_t idx[ku::kMaxRank] = {};
    ku::unravel(lin, x->dims.data(), r, idx);
    const double v = x->get(ku::dot(idx, x->strides));
    const int64_t yo = ku::dot(idx, y->strides);
    idx[axis] /= bs;
    y->set(yo, v * sc->get(ku::dot(idx, sc->strides)));
  }
  return {};
}

// ---------------------------------------------------------------- MOE
struct Moe {
  int64_t R = 0, E = 0, K = 0, N = 0, top_k = 1;
  int mode = 0;  // 0 NONE, 1 GATHER, 2 SCATTER
  Dims off;      // E + 1 entries
  Dims irow, orow;
};

int64_t read_int(const View& v, int64_t i) {
  // i-th value in logical row-major order.
  int64_t idx[ku::kMaxRank] = {};
  ku::unravel(i, v.dims.data(), v.rank(), idx);
  const int64_t o = ku::dot(idx, v.strides);
  if (v.dtype == DataType::INT64) return static_cast<const int64_t*>(v.data)[o];
  if (v.dtype == DataType::INT32) return static_cast<const int32_t*>(v.data)[o];
  return int64_t(v.get(o));
}

// Reads the routing; `rows_view` is the routed-row tensor (output or doutput) [R, N] / [1, R, N].
// `ekn` is [E, K, N] (weight's dims, or dweight's when the backward has no weight).
Status moe_setup(const Node& n, const Args& args, const View& token, const Dims& ekn, const View& rows_view, Moe& m) {
  const std::string& mode = n.attr_str("mode");
  m.mode = mode == "GATHER" ? 1 : mode == "SCATTER" ? 2 : 0;
  m.top_k = n.attr_int("top_k");
  m.E = ekn[0];
  m.K = ekn[1];
  m.N = ekn[2];
  m.R = rows_view.dims[rows_view.rank() - 2];
  const View* fo = ku::in(n, args, "first_token_offset");
  if (!fo) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "first_token_offset needs data");
  m.off.resize(size_t(m.E + 1));
  for (int64_t e = 0; e < m.E; ++e) m.off[size_t(e)] = std::clamp<int64_t>(read_int(*fo, e), 0, m.R);
  m.off[size_t(m.E)] = m.R;
  const View* ti = ku::in(n, args, "token_index");
  const View* tk = ku::in(n, args, "token_ks");
  const int64_t T = token.dims[token.rank() - 2];
  m.irow.resize(size_t(m.R));
  m.orow.resize(size_t(m.R));
  for (int64_t r = 0; r < m.R; ++r) {
    m.irow[size_t(r)] = r;
    m.orow[size_t(r)] = r;
    if (m.mode == 1) {
      if (!ti) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "GATHER needs token_index data");
      m.irow[size_t(r)] = read_int(*ti, r);
      if (m.irow[size_t(r)] < 0 || m.irow[size_t(r)] >= T)
        return n.fail(ErrorCode::INVALID_VALUE, "token_index[" + std::to_string(r) + "] is out of range");
    } else if (m.mode == 2) {
      if (!ti || !tk) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "SCATTER needs token_index and token_ks data");
      m.orow[size_t(r)] = read_int(*ti, r) * m.top_k + read_int(*tk, r);
      if (m.orow[size_t(r)] < 0 || m.orow[size_t(r)] >= m.R)
        return n.fail(ErrorCode::INVALID_VALUE, "token_index/token_ks of row " + std::to_string(r) + " send it out of range");
    }
  }
  return {};
}

// Row stride and column stride of the last two dims, and the base (leading dims are 1).
inline int64_t rs(const View& v) { return v.strides[v.rank() - 2]; }
inline int64_t cs(const View& v) { return v.strides[v.rank() - 1]; }

void zero(const View& v) {
  const int64_t total = v.volume();
  for (int64_t i = 0; i < total; ++i) {
    int64_t idx[ku::kMaxRank] = {};
    ku::unravel(i, v.dims.data(), v.rank(), idx);
    v.set(ku::dot(idx, v.strides), 0.0);
  }
}

// Scratch: the GEMM's (largest of the three shapes), then for the backward's dtoken R*K + T*K doubles.
int64_t gemm_part_moe(const Node& n, int64_t& R, int64_t& T, int64_t& K) {
  const TensorPtr& wt = n.in("weight") ? n.in("weight") : n.out("dweight");
  const auto& w = wt->get_dim();
  const auto& td = n.in("token")->get_dim();
  const TensorPtr& rows = n.kind() == OpKind::MOE_GROUPED_MATMUL ? n.out("output") : n.in("doutput");
  const auto& rd = rows->get_dim();
  if (w.size() != 3 || rd.size() < 2 || td.size() < 2) return 0;
  R = rd[rd.size() - 2];
  T = td[td.size() - 2];
  K = w[1];
  const int64_t N = w[2];
  const int64_t g = std::max({gemm::scratch_bytes(R, N, K), gemm::scratch_bytes(K, N, R), gemm::scratch_bytes(R, K, N)});
  return (g + 63) / 64 * 64;
}

int64_t scratch_moe(const Node& n) {
  int64_t R = 0, T = 0, K = 0;
  const int64_t g = gemm_part_moe(n, R, T, K);
  if (n.kind() == OpKind::MOE_GROUPED_MATMUL) return g;
  return g + (R * K + T * K) * int64_t(sizeof(double));
}

Status run_moe(const Node& n, const Args& args) {
  const View* out = ku::out(n, args, "output");
  const View* token = ku::in(n, args, "token");
  const View* weight = ku::in(n, args, "weight");
  if (!out) return {};
  if (!token || !weight) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "token and weight need data");
  Moe m;
  OPENDNN_RETURN_IF_ERROR(moe_setup(n, args, *token, weight->dims, *out, m));
  zero(*out);
  Dims kcols(size_t(m.K)), ncols(size_t(m.N)), wrows(size_t(m.K)), arows(size_t(m.R)), crows(size_t(m.R));
  for (int64_t k = 0; k < m.K; ++k) {
    kcols[size_t(k)] = k * cs(*token);
    wrows[size_t(k)] = k * weight->strides[1];
  }
  for (int64_t j = 0; j < m.N; ++j) ncols[size_t(j)] = j * cs(*out);
  Dims wcols(size_t(m.N));
  for (int64_t j = 0; j < m.N; ++j) wcols[size_t(j)] = j * weight->strides[2];
  for (int64_t r = 0; r < m.R; ++r) {
    arows[size_t(r)] = m.irow[size_t(r)] * rs(*token);
    crows[size_t(r)] = m.orow[size_t(r)] * rs(*out);
  }
  for (int64_t e = 0; e < m.E; ++e) {
    const int64_t r0 = m.off[size_t(e)], r1 = std::max(r0, m.off[size_t(e + 1)]);
    if (r1 == r0) continue;
    const int64_t wb = e * weight->strides[0];
    gemm::Problem p;
    p.M = r1 - r0;
    p.N = m.N;
    p.K = m.K;
    p.a = {token->dtype, token->data, arows.data() + r0, kcols.data(), nullptr, nullptr, nullptr};
    p.b = {weight->dtype, weight->data, wrows.data(), wcols.data(), &wb, nullptr, nullptr};
    p.c = {out->dtype, out->data, crows.data() + r0, ncols.data(), nullptr};
    gemm::run(p, args.scratch);
  }
  return {};
}

Status run_moe_bwd(const Node& n, const Args& args) {
  const View* dout = ku::in(n, args, "doutput");
  const View* token = ku::in(n, args, "token");
  const View* weight = ku::in(n, args, "weight");
  const View* dtoken = ku::out(n, args, "dtoken");
  const View* dweight = ku::out(n, args, "dweight");
  if (!dout || !token) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "doutput and token need data");
  if (n.in("weight") && !weight) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "weight needs data");
  Moe m;
  OPENDNN_RETURN_IF_ERROR(moe_setup(n, args, *token, weight ? weight->dims : n.out("dweight")->get_dim(), *dout, m));
  Dims krange(size_t(m.K)), nrange_dout(size_t(m.N)), w_k(size_t(m.K)), w_n(size_t(m.N));
  for (int64_t k = 0; k < m.K; ++k) {
    krange[size_t(k)] = k * cs(*token);
    w_k[size_t(k)] = weight ? k * weight->strides[1] : 0;
  }
  for (int64_t j = 0; j < m.N; ++j) {
    nrange_dout[size_t(j)] = j * cs(*dout);
    w_n[size_t(j)] = weight ? j * weight->strides[2] : 0;
  }
  Dims dout_rows(size_t(m.R)), tok_rows(size_t(m.R));
  for (int64_t r = 0; r < m.R; ++r) {
    dout_rows[size_t(r)] = m.orow[size_t(r)] * rs(*dout);
    tok_rows[size_t(r)] = m.irow[size_t(r)] * rs(*token);
  }
  if (dweight) {
    zero(*dweight);
    Dims dw_k(size_t(m.K)), dw_n(size_t(m.N));
    for (int64_t k = 0; k < m.K; ++k) dw_k[size_t(k)] = k * dweight->strides[1];
    for (int64_t j = 0; j < m.N; ++j) dw_n[size_t(j)] = j * dweight->strides[2];
    for (int64_t e = 0; e < m.E; ++e) {
      const int64_t r0 = m.off[size_t(e)], r1 = std::max(r0, m.off[size_t(e + 1)]);
      const int64_t wb = e * dweight->strides[0];
      // dweight[e] (K x N) = token_rows^T (K x Re) · dout_rows (Re x N).
      gemm::Problem p;
      p.M = m.K;
      p.N = m.N;
      p.K = r1 - r0;
      p.a = {token->dtype, token->data, krange.data(), tok_rows.data() + r0, nullptr, nullptr, nullptr};
      p.b = {dout->dtype, dout->data, dout_rows.data() + r0, nrange_dout.data(), nullptr, nullptr, nullptr};
      p.c = {dweight->dtype, dweight->data, dw_k.data(), dw_n.data(), &wb};
      gemm::run(p, args.scratch);
    }
  }
  if (dtoken && weight) {
    zero(*dtoken);
    const int64_t T = dtoken->dims[dtoken->rank() - 2];
    Dims dt_k(size_t(m.K));
    for (int64_t k = 0; k < m.K; ++k) dt_k[size_t(k)] = k * cs(*dtoken);
    // Per routed row: g[r] = dout[orow] · weight[e]^T, in double; then summed per token row.
    int64_t sR = 0, sT = 0, sK = 0;
    double* grow = reinterpret_cast<double*>(args.scratch + gemm_part_moe(n, sR, sT, sK));
    double* acc = grow + m.R * m.K;
    std::fill(grow, grow + m.R * m.K, 0.0);
    std::fill(acc, acc + T * m.K, 0.0);
    Dims g_rows(size_t(m.R)), g_cols(size_t(m.K));
    for (int64_t r = 0; r < m.R; ++r) g_rows[size_t(r)] = r * m.K;
    for (int64_t k = 0; k < m.K; ++k) g_cols[size_t(k)] = k;
    for (int64_t e = 0; e < m.E; ++e) {
      const int64_t r0 = m.off[size_t(e)], r1 = std::max(r0, m.off[size_t(e + 1)]);
      if (r1 == r0) continue;
      const int64_t wb = e * weight->strides[0];
      gemm::Problem p;
      p.M = r1 - r0;
      p.N = m.K;
      p.K = m.N;
      p.a = {dout->dtype, dout->data, dout_rows.data() + r0, nrange_dout.data(), nullptr, nullptr, nullptr};
      p.b = {weight->dtype, weight->data, w_n.data(), w_k.data(), &wb, nullptr, nullptr};  // weight^T
      p.c = {DataType::DOUBLE, grow, g_rows.data() + r0, g_cols.data(), nullptr};
      gemm::run(p, args.scratch);
    }
    for (int64_t r = 0; r < m.R; ++r) {
      if (r < m.off[0]) continue;
      for (int64_t k = 0; k < m.K; ++k) acc[m.irow[size_t(r)] * m.K + k] += grow[r * m.K + k];
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < m.K; ++k) dtoken->set(t * rs(*dtoken) + dt_k[size_t(k)], acc[t * m.K + k]);
  }
  return {};
}

// ---------------------------------------------------------------- ROPE
Status run_rope_common(const Node& n, const Args& args, const char* in_port, const char* out_port, double dir) {
  const View* x = ku::in(n, args, in_port);
  const View* cs_ = ku::in(n, args, "cos");
  const View* sn = ku::in(n, args, "sin");
  const View* y = ku::out(n, args, out_port);
  if (!y) return {};
  if (!x || !cs_ || !sn) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "input, cos and sin need data");
  const size_t r = x->rank();
  const int64_t D = x->dims[r - 1];
  const int64_t rd = n.has("rotary_dim") ? n.attr_int("rotary_dim") : D;
  const int64_t half = rd / 2;
  const bool inter = n.attr_bool("interleaved");
  const std::vector<int64_t> cst = ku::bcast_strides(*cs_, x->dims), snt = ku::bcast_strides(*sn, x->dims);
  ku::parallel_rows(x->dims, [&](const int64_t* idx, int64_t) {
    const int64_t xo = ku::dot(idx, x->strides), yo = ku::dot(idx, y->strides);
    const int64_t co = ku::dot(idx, cst), so = ku::dot(idx, snt);
    const int64_t xs = x->strides[r - 1], ys = y->strides[r - 1];
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = inter ? 2 * i : i, i1 = inter ? 2 * i + 1 : i + half;
      const double c = cs_->get(co + i * cst[r - 1]), s = dir * sn->get(so + i * snt[r - 1]);
      const double a = x->get(xo + i0 * xs), b = x->get(xo + i1 * xs);
      y->set(yo + i0 * ys, a * c - b * s);
      y->set(yo + i1 * ys, a * s + b * c);
    }
    for (int64_t d = 2 * half; d < D; ++d) y->set(yo + d * ys, x->get(xo + d * xs));
  });
  return {};
}

Status run_rope(const Node& n, const Args& args) { return run_rope_common(n, args, "X", "Y", 1.0); }
Status run_rope_bwd(const Node& n, const Args& args) { return run_rope_common(n, args, "DY", "DX", -1.0); }

}  // namespace

extern const Kernel kernel_RNG;
extern const Kernel kernel_RESAMPLE;
extern const Kernel kernel_BLOCK_SCALE_QUANTIZE;
extern const Kernel kernel_BLOCK_SCALE_DEQUANTIZE;
extern const Kernel kernel_MOE_GROUPED_MATMUL;
extern const Kernel kernel_MOE_GROUPED_MATMUL_BACKWARD;
extern const Kernel kernel_ROPE;
extern const Kernel kernel_ROPE_BACKWARD;
const Kernel kernel_RNG = {check_rank, nullptr, run_rng};
const Kernel kernel_RESAMPLE = {check_rank, nullptr, run_resample};
const Kernel kernel_BLOCK_SCALE_QUANTIZE = {check_quant, nullptr, run_quantize};
const Kernel kernel_BLOCK_SCALE_DEQUANTIZE = {check_quant, nullptr, run_dequantize};
const Kernel kernel_MOE_GROUPED_MATMUL = {check_rank, scratch_moe, run_moe};
const Kernel kernel_MOE_GROUPED_MATMUL_BACKWARD = {check_rank, scratch_moe, run_moe_bwd};
const Kernel kernel_ROPE = {check_rank, nullptr, run_rope};
const Kernel kernel_ROPE_BACKWARD = {check_rank, nullptr, run_rope_bwd};

}  // namespace opendnn::ref
