// SPDX-License-Identifier: Apache-2.0
// Reference kernels for the depthwise causal 1-D convolution (CAUSAL_CONV1D and its backward), in
// double. One (batch, channel) per task forward, one channel per task backward.
//
// Semantics: X element (b, c, t) is X[b, c, t] in NCW and X[b, t, c] in NWH (Y, DY, DX alike);
// W [C, Kw]; the extended input x_e[t] for t in [-(Kw-1), L) is X[b, c, t] for t >= 0, and
// initial_states[b, c, Kw-1+t] for t < 0 (0 without initial_states). Then
//   z[t] = bias[c] + sum_{k<Kw} W[c, k] * x_e[t - (Kw-1) + k],   Y = z or silu(z) = z * sigmoid(z),
//   final_states[b, c, m] = x_e[L - (Kw-1) + m] for m < Kw-1 (reaches into initial_states when L < Kw-1).
// Backward: dz = DY * act'(z); dx_e[t] = sum_k W[c, k] dz[t + (Kw-1) - k] (+ d_final_states[b, c, m]
// at t = L - (Kw-1) + m); DX = dx_e[t >= 0], d_initial_states[b, c, m] = dx_e[m - (Kw-1)];
// DW[c, k] = sum_{b,t} dz[t] x_e[t - (Kw-1) + k]; dbias[c] = sum_{b,t} dz[t].
#include <cmath>
#include <vector>

#include "engines/reference/family_util.h"
#include "engines/reference/kern_util.h"
#include "engines/reference/ref_kernel.h"

namespace opendnn::ref {

namespace {

using fam::in_view;
using fam::out_view;

struct Conv {
  int64_t B = 0, C = 0, L = 0, Kw = 0;
  bool nwh = false, silu = false;
  const View *x = nullptr, *w = nullptr, *bias = nullptr, *init = nullptr;

  int64_t xoff(const View* v, int64_t b, int64_t c, int64_t t) const {
    return nwh ? b * v->strides[0] + t * v->strides[1] + c * v->strides[2]
               : b * v->strides[0] + c * v->strides[1] + t * v->strides[2];
  }
  double w_at(int64_t c, int64_t k) const { return w->get(c * w->strides[0] + k * w->strides[1]); }
  static int64_t soff(const View* v, int64_t b, int64_t c, int64_t m) {
    return b * v->strides[0] + c * v->strides[1] + m * v->strides[2];
  }
  // Extended input of (b, c) as a vector indexed t + Kw - 1.
  void extended(int64_t b, int64_t c, std::vector<double>& xe) const {
    xe.assign(size_t(L + Kw - 1), 0.0);
    for (int64_t m = 0; m < Kw - 1; ++m) xe[size_t(m)] = init ? init->get(soff(init, b, c, m)) : 0.0;
    for (int64_t t = 0; t < L; ++t) xe[size_t(t + Kw - 1)] = x->get(xoff(x, b, c, t));
  }
  double z(const std::vector<double>& xe, int64_t c, int64_t t) const {
    double s = bias ? bias->get(bias->strides[0] * c) : 0.0;
    for (int64_t k = 0; k < Kw; ++k) s += w_at(c, k) * xe[size_t(t + k)];
    return s;
  }
};

Status make(const Node& n, const Args& a, Conv& c) {
  c.x = in_view(n, a, "X"), c.w = in_view(n, a, "W");
  if (!c.x || !c.w) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: X and W need data");
  if (c.x->rank() != 3 || c.w->rank() != 2) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: X must be 3-D and W 2-D");
  c.nwh = n.attr_str("layout") == "NWH";
  c.silu = n.attr_str("activation") == "SILU";
  c.B = c.x->dims[0];
  c.C = c.nwh ? c.x->dims[2] : c.x->dims[1];
  c.L = c.nwh ? c.x->dims[1] : c.x->dims[2];
  c.Kw = c.w->dims[1];
  if (c.w->dims[0] != c.C || c.Kw < 1) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: W must be [C, Kw]");
  c.bias = in_view(n, a, "bias");
  c.init = in_view(n, a, "initial_states");
  return {};
}

Status run_fwd(const Node& n, const Args& a) {
  Conv c;
  OPENDNN_RETURN_IF_ERROR(make(n, a, c));
  const View* y = out_view(n, a, "Y");
  const View* fin = out_view(n, a, "final_states");
#pragma omp parallel for collapse(2) schedule(static) if (ku::parallel_worth(ku::work_of({c.B, c.C, c.L, c.Kw})))
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t ch = 0; ch < c.C; ++ch) {
      std::vector<double> xe;
      c.extended(b, ch, xe);
      if (y)
        for (int64_t t = 0; t < c.L; ++t) {
          double z = c.z(xe, ch, t);
          y->set(c.xoff(y, b, ch, t), c.silu ? z * fam::sigmoid(z) : z);
        }
      if (fin)
        for (int64_t m = 0; m < c.Kw - 1; ++m) fin->set(Conv::soff(fin, b, ch, m), xe[size_t(c.L + m)]);
    }
  return {};
}

Status run_bwd(const Node& n, const Args& a) {
  Conv c;
  OPENDNN_RETURN_IF_ERROR(make(n, a, c));
  const View* dy = in_view(n, a, "DY");
  const View* dfin = in_view(n, a, "d_final_states");
  if (!dy) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: DY needs data");
  const View *dx = out_view(n, a, "DX"), *dw = out_view(n, a, "DW"), *db = out_view(n, a, "dbias");
  const View* dinit = out_view(n, a, "d_initial_states");
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({c.B, c.C, c.L, c.Kw})))
  for (int64_t ch = 0; ch < c.C; ++ch) {
    std::vector<double> xe, dz(size_t(c.L)), dxe(size_t(c.L + c.Kw - 1)), dwc(size_t(c.Kw), 0.0);
    double dbc = 0;
    for (int64_t b = 0; b < c.B; ++b) {
      c.extended(b, ch, xe);
      for (int64_t t = 0; t < c.L; ++t) {
        double g = dy->get(c.xoff(dy, b, ch, t));
        if (c.silu) {
          const double z = c.z(xe, ch, t), s = fam::sigmoid(z);
          g *= s * (1.0 + z * (1.0 - s));
        }
        dz[size_t(t)] = g;
        dbc += g;
        for (int64_t k = 0; k < c.Kw; ++k) dwc[size_t(k)] += g * xe[size_t(t + k)];
      }
      std::fill(dxe.begin(), dxe.end(), 0.0);
      for (int64_t t = 0; t < c.L; ++t)
        for (int64_t k = 0; k < c.Kw; ++k) dxe[size_t(t + k)] += c.w_at(ch, k) * dz[size_t(t)];
      if (dfin)
        for (int64_t m = 0; m < c.Kw - 1; ++m) dxe[size_t(c.L + m)] += dfin->get(Conv::soff(dfin, b, ch, m));
      if (dx)
        for (int64_t t = 0; t < c.L; ++t) dx->set(c.xoff(dx, b, ch, t), dxe[size_t(t + c.Kw - 1)]);
      if (dinit)
        for (int64_t m = 0; m < c.Kw - 1; ++m) dinit->set(Conv::soff(dinit, b, ch, m), dxe[size_t(m)]);
    }
    if (dw)
      for (int64_t k = 0; k < c.Kw; ++k) dw->set(ch * dw->strides[0] + k * dw->strides[1], dwc[size_t(k)]);
    if (db) db->set(db->strides[0] * ch, dbc);
  }
  return {};
}

}  // namespace

extern const Kernel kernel_CAUSAL_CONV1D, kernel_CAUSAL_CONV1D_BACKWARD;
const Kernel kernel_CAUSAL_CONV1D = {nullptr, nullptr, run_fwd};
const Kernel kernel_CAUSAL_CONV1D_BACKWARD = {nullptr, nullptr, run_bwd};

}  // namespace opendnn::ref
