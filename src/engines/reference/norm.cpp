// SPDX-License-Identifier: Apache-2.0
// Reference kernels for the normalisations, computed in double.
//
// Axis conventions. Every tensor of a node has X's rank; scale, bias and statistics broadcast to X
// (a dim of 1 repeats). The statistics are taken per "row": the row axes are those where the
// node's mean/inv_variance tensor (output in forward, input in backward) has X's extent; every
// other axis is normalised (the dims of src/ops/norm.cpp's rules). Without any statistics dims the
// defaults are:
//   LAYERNORM, RMSNORM          row axis 0 and every axis where scale has a dim of 1
//   INSTANCENORM                row axes 0 and 1 (per sample and channel, over the spatial dims)
//   ADALAYERNORM                every axis but the last (X [B,S,D], scale/bias [B,1,D])
//   BATCHNORM*, DBN_WEIGHT      row axis 1 (per channel, over N and the spatial dims)
//
// Formulas (n = elements per row, eps from the epsilon tensor, default 1e-5):
//   mean = sum(x)/n, var = sum((x-mean)^2)/n (biased), inv_variance = 1/sqrt(var + eps)
//   layer/instance/ada/batch norm:  y = (x - mean) * inv_variance * scale + bias
//   rmsnorm:                        inv_variance = 1/sqrt(sum(x^2)/n + eps), y = x * inv_variance * scale (+ bias)
//   batchnorm running statistics (as PyTorch): next_mean = (1-m)*prev_mean + m*mean,
//     next_var = (1-m)*prev_var + m*var*n/(n-1) (unbiased); momentum m defaults to 0.1. Without
//     prev_running_mean/var the next running statistics are not written (src/ops/norm.cpp's rule).
//   backward (given the saved mean/inv_variance): xhat = (x-mean)*iv, g = dy*scale,
//     dx = iv*(g - mean(g) - xhat*mean(g*xhat)); rmsnorm: xhat = x*iv, dx = iv*(g - xhat*mean(g*xhat));
//     dscale = sum(dy*xhat), dbias = sum(dy) over everything that broadcasts to one scale element.
//   BN_FINALIZE: mean = sum/count, var = sq_sum/count - mean^2, inv_variance = 1/sqrt(var+eps),
//     eq_scale = scale*inv_variance, eq_bias = bias - mean*eq_scale, running stats as batchnorm.
//   DBN_WEIGHT: dscale, dbias as above, and DX = eq_scale_dy*DY + eq_scale_x*X + eq_bias with
//     eq_scale_dy = scale*iv, eq_scale_x = -scale*iv^2*dscale/n, eq_bias = scale*iv*(iv*mean*dscale - dbias)/n.
#include <cmath>
#include <vector>

#include "engines/reference/family_util.h"
#include "engines/reference/kern_util.h"
#include "engines/reference/ref_kernel.h"

namespace opendnn::ref {

namespace {

using fam::AxisSplit;
using fam::in_view;
using fam::out_view;

enum class Rows { FIRST, FIRST_TWO, ALL_BUT_LAST, CHANNEL };

// The dims of a statistics tensor: its view's, else (INFERENCE phase, unbound output) the dims the
// inference rules gave the port's tensor.
const std::vector<int64_t>* stats_dims(const Node& n, const View* v, const char* port, bool output) {
  if (v) return &v->dims;
  int i = output ? n.spec().output_index(port) : n.spec().input_index(port);
  if (i < 0) return nullptr;
  const TensorPtr& t = output ? n.outputs()[size_t(i)] : n.inputs()[size_t(i)];
  return t && !t->get_dim().empty() ? &t->get_dim() : nullptr;
}

std::vector<bool> row_axes(const std::vector<int64_t>& xd, const std::vector<int64_t>* stats, Rows dflt,
                           const View* scale = nullptr) {
  std::vector<bool> outer(xd.size(), false);
  if (stats && stats->size() == xd.size() && xd.size() > 0) {
    for (size_t i = 0; i < xd.size(); ++i) outer[i] = (*stats)[i] == xd[i] && xd[i] != 1;
    return outer;
  }
  switch (dflt) {
    case Rows::FIRST:
      if (!xd.empty()) outer[0] = true;
      // layernorm/rmsnorm: a dim of 1 in scale is a batch axis ([1,1,H] scale on [B,S,H] normalises H).
      if (scale && scale->dims.size() == xd.size())
        for (size_t i = 1; i < xd.size(); ++i) outer[i] = scale->dims[i] == 1 && xd[i] != 1;
      break;
    case Rows::FIRST_TWO: for (size_t i = 0; i < xd.size() && i < 2; ++i) outer[i] = true; break;
    case Rows::ALL_BUT_LAST: for (size_t i = 0; i + 1 < xd.size(); ++i) outer[i] = true; break;
    case Rows::CHANNEL: if (xd.size() > 1) outer[1] = true; break;
  }
  return outer;
}

Status check_rank(const Node& n, const View& x, std::initializer_list<const View*> others) {
  for (const View* v : others)
    if (v && v->dims.size() != x.dims.size())
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: every tensor must have the rank of X");
  return {};
}

double bget(const View* v, const int64_t* idx, double dflt) { return v ? v->get(v->broadcast_offset_of(idx)) : dflt; }

// ---------------------------------------------------------------------------------------------
// Forward: layernorm / instancenorm / adalayernorm / rmsnorm / batchnorm (training).
Status norm_forward(const Node& n, const Args& a, bool rms, Rows dflt, bool batchnorm) {
  const View* x = in_view(n, a, "X");
  const View* scale = in_view(n, a, "scale");
  const View* bias = in_view(n, a, "bias");
  const View* y = out_view(n, a, "Y");
  const View* mean = batchnorm || !rms ? out_view(n, a, "mean") : nullptr;
  const View* iv = out_view(n, a, "inv_variance");
  if (!x) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: X has no data");
  OPENDNN_RETURN_IF_ERROR(check_rank(n, *x, {scale, bias, y, mean, iv}));
  const double eps = fam::scalar_in(n, a, "epsilon", 1e-5);
  bool inference = false;
  if (!batchnorm) inference = n.attr_str("forward_phase") == "INFERENCE";
  const std::vector<int64_t>* sd = stats_dims(n, mean, "mean", true);
  if (!sd) sd = stats_dims(n, iv, "inv_variance", true);
  if (inference) mean = iv = nullptr;
  AxisSplit sp(x->dims, row_axes(x->dims, sd, dflt, scale));
  const int64_t cnt = sp.n_inner;

  // Batchnorm running statistics.
  const View* pm = batchnorm ? in_view(n, a, "prev_running_mean") : nullptr;
  const View* pv = batchnorm ? in_view(n, a, "prev_running_var") : nullptr;
  const View* rm = pm && pv ? out_view(n, a, "next_running_mean") : nullptr;
  const View* rv = pm && pv ? out_view(n, a, "next_running_var") : nullptr;
  OPENDNN_RETURN_IF_ERROR(check_rank(n, *x, {rm, rv, pm, pv}));
  const double mom = batchnorm ? fam::scalar_in(n, a, "momentum", 0.1) : 0.0;

#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({sp.n_outer, cnt})))
  for (int64_t o = 0; o < sp.n_outer; ++o) {
    std::vector<int64_t> idx(x->dims.size(), 0);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < cnt; ++i) {
      sp.index(o, i, idx.data());
      double v = x->get(x->offset_of(idx.data()));
      s += v;
      s2 += v * v;
    }
    double mu = cnt ? s / double(cnt) : 0.0;
    double var = 0;
    if (rms) {
      var = cnt ? s2 / double(cnt) : 0.0;
      mu = 0;
    } else {
      for (int64_t i = 0; i < cnt; ++i) {
        sp.index(o, i, idx.data());
        double d = x->get(x->offset_of(idx.data())) - mu;
        var += d * d;
      }
      var = cnt ? var / double(cnt) : 0.0;
    }
    const double inv = 1.0 / std::sqrt(var + eps);
    sp.index(o, 0, idx.data());
    if (mean) mean->set(mean->broadcast_offset_of(idx.data()), mu);
    if (iv) iv->set(iv->broadcast_offset_of(idx.data()), inv);
    if (rm) rm->set(rm->broadcast_offset_of(idx.data()), (1 - mom) * bget(pm, idx.data(), 0.0) + mom * mu);
    if (rv) {
      double unb = cnt > 1 ? var * double(cnt) / double(cnt - 1) : var;
      rv->set(rv->broadcast_offset_of(idx.data()), (1 - mom) * bget(pv, idx.data(), 1.0) + mom * unb);
    }
    if (y)
      for (int64_t i = 0; i < cnt; ++i) {
        sp.index(o, i, idx.data());
        double v = (x->get(x->offset_of(idx.data())) - mu) * inv;
        v = v * bget(scale, idx.data(), 1.0) + bget(bias, idx.data(), 0.0);
        y->set(y->offset_of(idx.data()), v);
      }
  }
  return {};
}

Status run_layernorm(const Node& n, const Args& a) { return norm_forward(n, a, false, Rows::FIRST, false); }
Status run_instancenorm(const Node& n, const Args& a) { return norm_forward(n, a, false, Rows::FIRST_TWO, false); }
Status run_adalayernorm(const Node& n, const Args& a) { return norm_forward(n, a, false, Rows::ALL_BUT_LAST, false); }
Status run_rmsnorm(const Node& n, const Args& a) { return norm_forward(n, a, true, Rows::FIRST, false); }
Status run_batchnorm(const Node& n, const Args& a) { return norm_forward(n, a, false, Rows::CHANNEL, true); }

// ---------------------------------------------------------------------------------------------
Status run_batchnorm_inference(const Node& n, const Args& a) {
  const View* x = in_view(n, a, "X");
  const View* mean = in_view(n, a, "mean");
  const View* iv = in_view(n, a, "inv_variance");
  const View* scale = in_view(n, a, "scale");
  const View* bias = in_view(n, a, "bias");
  const View* y = out_view(n, a, "Y");
  if (!x || !y) return {};
  OPENDNN_RETURN_IF_ERROR(check_rank(n, *x, {mean, iv, scale, bias, y}));
  const int64_t total = x->volume();
  const size_t r = x->dims.size();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(total))
  for (int64_t lin = 0; lin < total; ++lin) {
    std::vector<int64_t> idx(r);
    int64_t t = lin;
    for (size_t k = r; k-- > 0;) { idx[k] = t % x->dims[k]; t /= x->dims[k]; }
    double v = (x->get(x->offset_of(idx.data())) - bget(mean, idx.data(), 0.0)) * bget(iv, idx.data(), 1.0);
    y->set(y->offset_of(idx.data()), v * bget(scale, idx.data(), 1.0) + bget(bias, idx.data(), 0.0));
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Backward of the mean/variance norms and of rmsnorm.
Status norm_backward(const Node& n, const Args& a, bool rms, Rows dflt, bool want_dbias) {
  const View* dy = in_view(n, a, "DY");
  const View* x = in_view(n, a, "X");
  const View* scale = in_view(n, a, "scale");
  const View* mean = rms ? nullptr : in_view(n, a, "mean");
  const View* iv = in_view(n, a, "inv_variance");
  const View* dx = out_view(n, a, "DX");
  const View* dscale = out_view(n, a, "dscale");
  const View* dbias = want_dbias ? out_view(n, a, "dbias") : nullptr;
  if (!x || !dy || !iv || (!rms && !mean))
    return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: DY, X, mean and inv_variance need data");
  OPENDNN_RETURN_IF_ERROR(check_rank(n, *x, {dy, scale, mean, iv, dx, dscale, dbias}));
  AxisSplit sp(x->dims, row_axes(x->dims, mean ? &mean->dims : &iv->dims, dflt, scale));
  const int64_t cnt = sp.n_inner;
  const size_t r = x->dims.size();

  if (dx) {
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({sp.n_outer, cnt})))
    for (int64_t o = 0; o < sp.n_outer; ++o) {
      std::vector<int64_t> idx(r, 0);
      sp.index(o, 0, idx.data());
      const double mu = bget(mean, idx.data(), 0.0), inv = bget(iv, idx.data(), 1.0);
      double sg = 0, sgx = 0;
      for (int64_t i = 0; i < cnt; ++i) {
        sp.index(o, i, idx.data());
        double g = dy->get(dy->offset_of(idx.data())) * bget(scale, idx.data(), 1.0);
        double xh = (x->get(x->offset_of(idx.data())) - mu) * inv;
        sg += g;
        sgx += g * xh;
      }
      const double mg = cnt ? sg / double(cnt) : 0.0, mgx = cnt ? sgx / double(cnt) : 0.0;
      for (int64_t i = 0; i < cnt; ++i) {
        sp.index(o, i, idx.data());
        double g = dy->get(dy->offset_of(idx.data())) * bget(scale, idx.data(), 1.0);
        double xh = (x->get(x->offset_of(idx.data())) - mu) * inv;
        double v = rms ? inv * (g - xh * mgx) : inv * (g - mg - xh * mgx);
        dx->set(dx->offset_of(idx.data()), v);
      }
    }
  }
  // dscale / dbias: one pass per element of their shape, summing what broadcasts onto it.
  for (const View* w : {dscale, dbias}) {
    if (!w) continue;
    const bool is_scale = w == dscale;
    std::vector<bool> outer(r);
    for (size_t i = 0; i < r; ++i) outer[i] = w->dims[i] != 1;
    AxisSplit ws(x->dims, outer);
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({ws.n_outer, ws.n_inner})))
    for (int64_t o = 0; o < ws.n_outer; ++o) {
      std::vector<int64_t> idx(r, 0);
      double acc = 0;
      for (int64_t i = 0; i < ws.n_inner; ++i) {
        ws.index(o, i, idx.data());
        double d = dy->get(dy->offset_of(idx.data()));
        if (is_scale) d *= (x->get(x->offset_of(idx.data())) - bget(mean, idx.data(), 0.0)) * bget(iv, idx.data(), 1.0);
        acc += d;
      }
      ws.index(o, 0, idx.data());
      w->set(w->broadcast_offset_of(idx.data()), acc);
    }
  }
  return {};
}

Status run_layernorm_bwd(const Node& n, const Args& a) { return norm_backward(n, a, false, Rows::FIRST, true); }
Status run_instancenorm_bwd(const Node& n, const Args& a) { return norm_backward(n, a, false, Rows::FIRST_TWO, true); }
Status run_adalayernorm_bwd(const Node& n, const Args& a) { return norm_backward(n, a, false, Rows::ALL_BUT_LAST, true); }
Status run_batchnorm_bwd(const Node& n, const Args& a) { return norm_backward(n, a, false, Rows::CHANNEL, true); }
Status run_rmsnorm_bwd(const Node& n, const Args& a) { return norm_backward(n, a, true, Rows::FIRST, n.attr_bool("has_dbias")); }

// ---------------------------------------------------------------------------------------------
Status run_bn_finalize(const Node& n, const Args& a) {
  const View* sum = in_view(n, a, "sum");
  const View* sq = in_view(n, a, "sq_sum");
  const View* scale = in_view(n, a, "scale");
  const View* bias = in_view(n, a, "bias");
  const View* pm = in_view(n, a, "prev_running_mean");
  const View* pv = in_view(n, a, "prev_running_var");
  if (!sum || !sq) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: sum and sq_sum need data");
  const double eps = fam::scalar_in(n, a, "epsilon", 1e-5);
  const double cnt = fam::scalar_in(n, a, "accum_count", 1.0);
  const double mom = fam::scalar_in(n, a, "momentum", 0.1);
  const View* eqs = out_view(n, a, "eq_scale");
  const View* eqb = out_view(n, a, "eq_bias");
  const View* mo = out_view(n, a, "mean");
  const View* ivo = out_view(n, a, "inv_variance");
  const View* rm = pm && pv ? out_view(n, a, "next_running_mean") : nullptr;
  const View* rv = pm && pv ? out_view(n, a, "next_running_var") : nullptr;
  OPENDNN_RETURN_IF_ERROR(check_rank(n, *sum, {sq, scale, bias, pm, pv, eqs, eqb, mo, ivo, rm, rv}));
  for_each_index(sum->dims, [&](const int64_t* idx, int64_t) {
    double mu = sum->get(sum->offset_of(idx)) / cnt;
    double var = sq->get(sq->broadcast_offset_of(idx)) / cnt - mu * mu;
    double inv = 1.0 / std::sqrt(var + eps);
    double es = bget(scale, idx, 1.0) * inv;
    if (eqs) eqs->set(eqs->broadcast_offset_of(idx), es);
    if (eqb) eqb->set(eqb->broadcast_offset_of(idx), bget(bias, idx, 0.0) - mu * es);
    if (mo) mo->set(mo->broadcast_offset_of(idx), mu);
    if (ivo) ivo->set(ivo->broadcast_offset_of(idx), inv);
    if (rm) rm->set(rm->broadcast_offset_of(idx), (1 - mom) * bget(pm, idx, 0.0) + mom * mu);
    double unb = cnt > 1 ? var * cnt / (cnt - 1) : var;
    if (rv) rv->set(rv->broadcast_offset_of(idx), (1 - mom) * bget(pv, idx, 1.0) + mom * unb);
  });
  return {};
}

Status run_dbn_weight(const Node& n, const Args& a) {
  const View* dy = in_view(n, a, "DY");
  const View* x = in_view(n, a, "X");
  const View* mean = in_view(n, a, "mean");
  const View* iv = in_view(n, a, "inv_variance");
  const View* scale = in_view(n, a, "scale");
  if (!dy || !x || !mean || !iv) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: DY, X, mean, inv_variance need data");
  const View* ds = out_view(n, a, "dscale");
  const View* db = out_view(n, a, "dbias");
  const View* e_dy = out_view(n, a, "eq_scale_dy");
  const View* e_x = out_view(n, a, "eq_scale_x");
  const View* e_b = out_view(n, a, "eq_bias");
  OPENDNN_RETURN_IF_ERROR(check_rank(n, *x, {dy, mean, iv, scale, ds, db, e_dy, e_x, e_b}));
  AxisSplit sp(x->dims, row_axes(x->dims, &mean->dims, Rows::CHANNEL));
  const size_t r = x->dims.size();
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({sp.n_outer, sp.n_inner})))
  for (int64_t o = 0; o < sp.n_outer; ++o) {
    std::vector<int64_t> idx(r, 0);
    sp.index(o, 0, idx.data());
    const double mu = bget(mean, idx.data(), 0.0), inv = bget(iv, idx.data(), 1.0);
    const double sc = bget(scale, idx.data(), 1.0);
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < sp.n_inner; ++i) {
      sp.index(o, i, idx.data());
      double d = dy->get(dy->offset_of(idx.data()));
      sdy += d;
      sdyx += d * (x->get(x->offset_of(idx.data())) - mu) * inv;
    }
    const double m = double(sp.n_inner ? sp.n_inner : 1);
    sp.index(o, 0, idx.data());
    if (ds) ds->set(ds->broadcast_offset_of(idx.data()), sdyx);
    if (db) db->set(db->broadcast_offset_of(idx.data()), sdy);
    if (e_dy) e_dy->set(e_dy->broadcast_offset_of(idx.data()), sc * inv);
    if (e_x) e_x->set(e_x->broadcast_offset_of(idx.data()), -sc * inv * inv * sdyx / m);
    if (e_b) e_b->set(e_b->broadcast_offset_of(idx.data()), sc * inv * (inv * mu * sdyx - sdy) / m);
  }
  return {};
}

}  // namespace

extern const Kernel kernel_BATCHNORM, kernel_BATCHNORM_INFERENCE, kernel_BATCHNORM_BACKWARD, kernel_BN_FINALIZE,
    kernel_DBN_WEIGHT, kernel_LAYERNORM, kernel_LAYERNORM_BACKWARD, kernel_RMSNORM, kernel_RMSNORM_BACKWARD,
    kernel_INSTANCENORM, kernel_INSTANCENORM_BACKWARD, kernel_ADALAYERNORM, kernel_ADALAYERNORM_BACKWARD;

const Kernel kernel_BATCHNORM = {nullptr, nullptr, run_batchnorm};
const Kernel kernel_BATCHNORM_INFERENCE = {nullptr, nullptr, run_batchnorm_inference};
const Kernel kernel_BATCHNORM_BACKWARD = {nullptr, nullptr, run_batchnorm_bwd};
const Kernel kernel_BN_FINALIZE = {nullptr, nullptr, run_bn_finalize};
const Kernel kernel_DBN_WEIGHT = {nullptr, nullptr, run_dbn_weight};
const Kernel kernel_LAYERNORM = {nullptr, nullptr, run_layernorm};
const Kernel kernel_LAYERNORM_BACKWARD = {nullptr, nullptr, run_layernorm_bwd};
const Kernel kernel_RMSNORM = {nullptr, nullptr, run_rmsnorm};
const Kernel kernel_RMSNORM_BACKWARD = {nullptr, nullptr, run_rmsnorm_bwd};
const Kernel kernel_INSTANCENORM = {nullptr, nullptr, run_instancenorm};
const Kernel kernel_INSTANCENORM_BACKWARD = {nullptr, nullptr, run_instancenorm_bwd};
const Kernel kernel_ADALAYERNORM = {nullptr, nullptr, run_adalayernorm};
const Kernel kernel_ADALAYERNORM_BACKWARD = {nullptr, nullptr, run_adalayernorm_bwd};

}  // namespace opendnn::ref
