// SPDX-License-Identifier: Apache-2.0
// Reference kernels for CONV_FPROP, CONV_DGRAD and CONV_WGRAD: implicit GEMMs on the blocked GEMM
// (gemm.h). The im2col operand is never materialised: the GEMM's packing reads it element by element
// through a callback (zero outside the padded image), so scratch is only the GEMM's panels.
//
// Layout conventions (src/ops/conv.cpp): X [N, C, s...], W [K, C/G, k...], Y [N, K, o...], any
// strides, 1-3 spatial dims, groups G = C / W.dims[1];
//   o = floor((s + pre + post - dil*(k-1) - 1) / stride) + 1, input position = o*stride - pre + r*dil.
// CONVOLUTION mode uses the flipped kernel tap (k-1-r) where CROSS_CORRELATION uses r.
// Products accumulate in double and each output is rounded once (whatever the compute type).
//
//   fprop, per (n, g):  Y[kk, o]      = sum_(c,r)  W[kk, c, r~] * X[c, o*st - pre + r*dil]
//   dgrad, per (n, g):  DX[c, x]      = sum_(kk,r) W[kk, c, r~] * DY[kk, (x + pre - r*dil)/st]  (when exact)
//   wgrad, per g:       DW[kk, c, r~] = sum_(n,o)  DY[n, kk, o] * X[n, c, o*st - pre + r*dil]
#include <algorithm>
#include <string>
#include <vector>

#include "common/alloc_guard.h"
#include "engines/reference/gemm.h"
#include "engines/reference/kern_util.h"

namespace opendnn::ref {
namespace {

using Dims = std::vector<int64_t>;

struct Conv {
  int nsp = 0;
  int64_t N = 0, C = 0, K = 0, G = 1, Cg = 0, Kg = 0;
  Dims in_sp, out_sp, k_sp, pre, stride, dil;
  bool flip = false;
};

Dims attr_or(const Node& n, const char* name, size_t count, int64_t dflt) {
  const Dims& v = n.attr_ints(name);
  if (v.size() == count) return v;
  return Dims(count, dflt);
}

// Reads the geometry from the node's tensors: act = the [N, C, s...] tensor (X or DX),
// flt = W / DW, res = the [N, K, o...] tensor (Y or DY).
Conv geometry(const Node& n, const TensorPtr& act, const TensorPtr& flt, const TensorPtr& res) {
  Conv c;
  const Dims& a = act->get_dim();
  const Dims& w = flt->get_dim();
  const Dims& y = res->get_dim();
  c.nsp = int(a.size()) - 2;
  c.N = a[0];
  c.C = a[1];
  c.K = w[0];
  c.G = w[1] > 0 ? std::max<int64_t>(1, c.C / w[1]) : 1;
  c.Cg = w[1];
  c.Kg = c.K / c.G;
  c.in_sp.assign(a.begin() + 2, a.end());
  c.out_sp.assign(y.begin() + 2, y.end());
  c.k_sp.assign(w.begin() + 2, w.end());
  c.pre = attr_or(n, "pre_padding", size_t(c.nsp), 0);
  c.stride = attr_or(n, "stride", size_t(c.nsp), 1);
  c.dil = attr_or(n, "dilation", size_t(c.nsp), 1);
  c.flip = n.attr_str("convolution_mode") == "CONVOLUTION";
  return c;
}

Conv geometry_of(const Node& n) {
  switch (n.kind()) {
    case OpKind::CONV_FPROP: return geometry(n, n.in("X"), n.in("W"), n.out("Y"));
    case OpKind::CONV_DGRAD: return geometry(n, n.out("DX"), n.in("W"), n.in("DY"));
    default: return geometry(n, n.in("X"), n.out("DW"), n.in("DY"));
  }
}

// Every spatial position of `ext`, row-major, as nsp coordinates each.
Dims positions(const Dims& ext) {
  int64_t total = ku::volume(ext);
  Dims out = alloc_buffer<int64_t>(static_cast<size_t>(total) * ext.size(), "the convolution's table of spatial positions");
  int64_t idx[ku::kMaxRank] = {};
  for (int64_t p = 0; p < total; ++p) {
    ku::unravel(p, ext.data(), ext.size(), idx);
    for (size_t d = 0; d < ext.size(); ++d) out[size_t(p) * ext.size() + d] = idx[d];
  }
  return out;
}

// The implicit operand: element (b, r, c) of a tensor v [N, C, s...] at image batch_img[b] +
// row_img[r] + col_img[c], channel batch_ch[b] + row_ch[r] + col_ch[c], spatial t = row_sp + col_sp
// (divided by `div` when it must divide exactly, dgrad), zero outside.
struct Implicit {
  const View* v = nullptr;
  int nsp = 0;
  int64_t ext[3] = {1, 1, 1};
  int64_t div[3] = {1, 1, 1};
  bool divide = false;
  Dims batch_img, batch_ch, row_img, row_ch, row_sp, col_img, col_ch, col_sp;
};

double implicit_at(const void* ctx, int64_t b, int64_t r, int64_t c) {
  const Implicit& m = *static_cast<const Implicit*>(ctx);
  const View& v = *m.v;
  const int64_t img = m.batch_img[size_t(b)] + m.row_img[size_t(r)] + m.col_img[size_t(c)];
  const int64_t ch = m.batch_ch[size_t(b)] + m.row_ch[size_t(r)] + m.col_ch[size_t(c)];
  int64_t off = img * v.strides[0] + ch * v.strides[1];
  for (int d = 0; d < m.nsp; ++d) {
    int64_t t = m.row_sp[size_t(r) * size_t(m.nsp) + size_t(d)] + m.col_sp[size_t(c) * size_t(m.nsp) + size_t(d)];
    if (m.divide) {
      if (t < 0 || t % m.div[d] != 0) return 0.0;
      t /= m.div[d];
    }
    if (t < 0 || t >= m.ext[d]) return 0.0;
    off += t * v.strides[size_t(2 + d)];
  }
  return v.get(off);
}

// Offsets of every spatial position of `ext` in a view whose spatial strides start at axis 2.
Dims spatial_offsets(const View& v, const Dims& ext) {
  Dims pos = positions(ext);
  int64_t total = ku::volume(ext);
  Dims out = alloc_buffer<int64_t>(static_cast<size_t>(total), "the convolution's table of spatial offsets");
  for (int64_t p = 0; p < total; ++p) {
    int64_t o = 0;
    for (size_t d = 0; d < ext.size(); ++d) o += pos[size_t(p) * ext.size() + d] * v.strides[2 + d];
    out[size_t(p)] = o;
  }
  return out;
}

// Filter taps: for each (outer, tap) column, the filter offset and the dilated tap displacement.
struct Taps {
  int64_t count = 1;
  Dims pos;      // count * nsp: r per dim
  Dims flt_sp;   // count: offset of the (possibly flipped) tap in the filter's spatial strides
};
Taps taps(const Conv& c, const View& flt) {
  Taps t;
  t.count = ku::volume(c.k_sp);
  t.pos = positions(c.k_sp);
  t.flt_sp.resize(size_t(t.count));
  for (int64_t i = 0; i < t.count; ++i) {
    int64_t o = 0;
    for (int d = 0; d < c.nsp; ++d) {
      int64_t r = t.pos[size_t(i) * size_t(c.nsp) + size_t(d)];
      int64_t rr = c.flip ? c.k_sp[size_t(d)] - 1 - r : r;
      o += rr * flt.strides[size_t(2 + d)];
    }
    t.flt_sp[size_t(i)] = o;
  }
  return t;
}

Status check(const Node& n) {
  OPENDNN_RETURN_IF_ERROR(ku::check_rank(n));
  for (const auto& t : n.inputs())
    if (t && (t->get_dim().size() < 3 || t->get_dim().size() > 5))
      return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "convolution tensors need 3 to 5 dims");
  Conv c = geometry_of(n);
  if (c.Cg <= 0 || c.C % c.Cg != 0 || c.K % c.G != 0)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "channel counts do not form whole groups");
  return {};
}

void gemm_dims(const Node& n, int64_t& M, int64_t& N, int64_t& K) {
  Conv c = geometry_of(n);
  const int64_t R = ku::volume(c.k_sp), P = ku::volume(c.out_sp), S = ku::volume(c.in_sp);
  switch (n.kind()) {
    case OpKind::CONV_FPROP: M = c.Kg, N = P, K = c.Cg * R; break;
    case OpKind::CONV_DGRAD: M = c.Cg, N = S, K = c.Kg * R; break;
    default: M = c.Kg, N = c.Cg * R, K = c.N * P; break;
  }
}

int64_t scratch(const Node& n) {
  int64_t M = 0, N = 0, K = 0;
  gemm_dims(n, M, N, K);
  return gemm::scratch_bytes(M, N, K);
}

Dims lin(int64_t n, int64_t stride) {
  Dims v(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i * stride;
  return v;
}

Status run_fprop(const Node& n, const Args& args) {
  const View* Y = ku::out(n, args, "Y");
  const View* X = ku::in(n, args, "X");
  const View* W = ku::in(n, args, "W");
  if (!Y) return {};
  if (!X || !W) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X and W need data");
  const Conv c = geometry_of(n);
  const Taps tp = taps(c, *W);
  const int64_t R = tp.count, P = ku::volume(c.out_sp), B = c.N * c.G;
  const size_t ns = size_t(c.nsp);
  // A = W[g*Kg + kk, c, r~]: rows kk, cols (c, r).
  Dims a_rows = lin(c.Kg, W->strides[0]), a_cols(static_cast<size_t>(c.Cg * R)), a_b(static_cast<size_t>(B));
  for (int64_t ci = 0; ci < c.Cg; ++ci)
    for (int64_t r = 0; r < R; ++r) a_cols[size_t(ci * R + r)] = ci * W->strides[1] + tp.flt_sp[size_t(r)];
  // B = X im2col: rows (c, r), cols o.
  Implicit im;
  im.v = X;
  im.nsp = c.nsp;
  for (size_t d = 0; d < ns; ++d) im.ext[d] = c.in_sp[d];
  im.batch_img.resize(size_t(B));
  im.batch_ch.resize(size_t(B));
  im.row_img.assign(size_t(c.Cg * R), 0);
  im.row_ch.resize(size_t(c.Cg * R));
  im.row_sp.resize(size_t(c.Cg * R) * ns);
  for (int64_t ci = 0; ci < c.Cg; ++ci)
    for (int64_t r = 0; r < R; ++r) {
      size_t row = size_t(ci * R + r);
      im.row_ch[row] = ci;
      for (size_t d = 0; d < ns; ++d) im.row_sp[row * ns + d] = tp.pos[size_t(r) * ns + d] * c.dil[d];
    }
  Dims opos = positions(c.out_sp);
  im.col_img.assign(size_t(P), 0);
  im.col_ch.assign(size_t(P), 0);
  im.col_sp.resize(size_t(P) * ns);
  for (int64_t p = 0; p < P; ++p)
    for (size_t d = 0; d < ns; ++d) im.col_sp[size_t(p) * ns + d] = opos[size_t(p) * ns + d] * c.stride[d] - c.pre[d];
  // C = Y[n, g*Kg + kk, o].
  Dims c_rows = lin(c.Kg, Y->strides[1]), c_cols = spatial_offsets(*Y, c.out_sp), c_b(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t img = b / c.G, g = b % c.G;
    a_b[size_t(b)] = g * c.Kg * W->strides[0];
    im.batch_img[size_t(b)] = img;
    im.batch_ch[size_t(b)] = g * c.Cg;
    c_b[size_t(b)] = img * Y->strides[0] + g * c.Kg * Y->strides[1];
  }
  gemm::Problem p;
  p.batch = B;
  p.M = c.Kg;
  p.N = P;
  p.K = c.Cg * R;
  p.a = {W->dtype, W->data, a_rows.data(), a_cols.data(), a_b.data(), nullptr, nullptr};
  p.b.fn = implicit_at;
  p.b.ctx = &im;
  p.c = {Y->dtype, Y->data, c_rows.data(), c_cols.data(), c_b.data()};
  gemm::run(p, args.scratch);
  return {};
}

Status run_dgrad(const Node& n, const Args& args) {
  const View* DX = ku::out(n, args, "DX");
  const View* DY = ku::in(n, args, "DY");
  const View* W = ku::in(n, args, "W");
  if (!DX) return {};
  if (!DY || !W) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "DY and W need data");
  const Conv c = geometry_of(n);
  const Taps tp = taps(c, *W);
  const int64_t R = tp.count, S = ku::volume(c.in_sp), B = c.N * c.G;
  const size_t ns = size_t(c.nsp);
  // A = W[g*Kg + kk, c, r~]: rows c, cols (kk, r).
  Dims a_rows = lin(c.Cg, W->strides[1]), a_cols(static_cast<size_t>(c.Kg * R)), a_b(static_cast<size_t>(B));
  for (int64_t kk = 0; kk < c.Kg; ++kk)
    for (int64_t r = 0; r < R; ++r) a_cols[size_t(kk * R + r)] = kk * W->strides[0] + tp.flt_sp[size_t(r)];
  // B = DY[n, g*Kg + kk, (x + pre - r*dil) / stride]: rows (kk, r), cols x.
  Implicit im;
  im.v = DY;
  im.nsp = c.nsp;
  im.divide = true;
  for (size_t d = 0; d < ns; ++d) {
    im.ext[d] = c.out_sp[d];
    im.div[d] = c.stride[d];
  }
  im.batch_img.resize(size_t(B));
  im.batch_ch.resize(size_t(B));
  im.row_img.assign(size_t(c.Kg * R), 0);
  im.row_ch.resize(size_t(c.Kg * R));
  im.row_sp.resize(size_t(c.Kg * R) * ns);
  for (int64_t kk = 0; kk < c.Kg; ++kk)
    for (int64_t r = 0; r < R; ++r) {
      size_t row = size_t(kk * R + r);
      im.row_ch[row] = kk;
      for (size_t d = 0; d < ns; ++d) im.row_sp[row * ns + d] = c.pre[d] - tp.pos[size_t(r) * ns + d] * c.dil[d];
    }
  Dims xpos = positions(c.in_sp);
  im.col_img.assign(size_t(S), 0);
  im.col_ch.assign(size_t(S), 0);
  im.col_sp = xpos;
  // C = DX[n, g*Cg + c, x].
  Dims c_rows = lin(c.Cg, DX->strides[1]), c_cols = spatial_offsets(*DX, c.in_sp), c_b(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t img = b / c.G, g = b % c.G;
    a_b[size_t(b)] = g * c.Kg * W->strides[0];
    im.batch_img[size_t(b)] = img;
    im.batch_ch[size_t(b)] = g * c.Kg;
    c_b[size_t(b)] = img * DX->strides[0] + g * c.Cg * DX->strides[1];
  }
  gemm::Problem p;
  p.batch = B;
  p.M = c.Cg;
  p.N = S;
  p.K = c.Kg * R;
  p.a = {W->dtype, W->data, a_rows.data(), a_cols.data(), a_b.data(), nullptr, nullptr};
  p.b.fn = implicit_at;
  p.b.ctx = &im;
  p.c = {DX->dtype, DX->data, c_rows.data(), c_cols.data(), c_b.data()};
  gemm::run(p, args.scratch);
  return {};
}

Status run_wgrad(const Node& n, const Args& args) {
  const View* DW = ku::out(n, args, "DW");
  const View* X = ku::in(n, args, "X");
  const View* DY = ku::in(n, args, "DY");
  if (!DW) return {};
  if (!X || !DY) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "X and DY need data");
  const Conv c = geometry_of(n);
  const Taps tp = taps(c, *DW);
  const int64_t R = tp.count, P = ku::volume(c.out_sp), B = c.G;
  const size_t ns = size_t(c.nsp);
  // A = DY[n, g*Kg + kk, o]: rows kk, cols (n, o).
  Dims a_rows = lin(c.Kg, DY->strides[1]), a_cols(static_cast<size_t>(c.N * P)), a_b(static_cast<size_t>(B));
  Dims dy_sp = spatial_offsets(*DY, c.out_sp);
  for (int64_t img = 0; img < c.N; ++img)
    for (int64_t o = 0; o < P; ++o) a_cols[size_t(img * P + o)] = img * DY->strides[0] + dy_sp[size_t(o)];
  // B = X[n, g*Cg + c, o*st - pre + r*dil]: rows (n, o), cols (c, r).
  Implicit im;
  im.v = X;
  im.nsp = c.nsp;
  for (size_t d = 0; d < ns; ++d) im.ext[d] = c.in_sp[d];
  im.batch_img.assign(size_t(B), 0);
  im.batch_ch.resize(size_t(B));
  Dims opos = positions(c.out_sp);
  im.row_img.resize(size_t(c.N * P));
  im.row_ch.assign(size_t(c.N * P), 0);
  im.row_sp.resize(size_t(c.N * P) * ns);
  for (int64_t img = 0; img < c.N; ++img)
    for (int64_t o = 0; o < P; ++o) {
      size_t row = size_t(img * P + o);
      im.row_img[row] = img;
      for (size_t d = 0; d < ns; ++d) im.row_sp[row * ns + d] = opos[size_t(o) * ns + d] * c.stride[d] - c.pre[d];
    }
  im.col_img.assign(size_t(c.Cg * R), 0);
  im.col_ch.resize(size_t(c.Cg * R));
  im.col_sp.resize(size_t(c.Cg * R) * ns);
  // C = DW[g*Kg + kk, c, r~]: rows kk, cols (c, r).
  Dims c_rows = lin(c.Kg, DW->strides[0]), c_cols(static_cast<size_t>(c.Cg * R)), c_b(static_cast<size_t>(B));
  for (int64_t ci = 0; ci < c.Cg; ++ci)
    for (int64_t r = 0; r < R; ++r) {
      size_t col = size_t(ci * R + r);
      im.col_ch[col] = ci;
      for (size_t d = 0; d < ns; ++d) im.col_sp[col * ns + d] = tp.pos[size_t(r) * ns + d] * c.dil[d];
      c_cols[col] = ci * DW->strides[1] + tp.flt_sp[size_t(r)];
    }
  for (int64_t g = 0; g < B; ++g) {
    a_b[size_t(g)] = g * c.Kg * DY->strides[1];
    im.batch_ch[size_t(g)] = g * c.Cg;
    c_b[size_t(g)] = g * c.Kg * DW->strides[0];
  }
  gemm::Problem p;
  p.batch = B;
  p.M = c.Kg;
  p.N = c.Cg * R;
  p.K = c.N * P;
  p.a = {DY->dtype, DY->data, a_rows.data(), a_cols.data(), a_b.data(), nullptr, nullptr};
  p.b.fn = implicit_at;
  p.b.ctx = &im;
  p.c = {DW->dtype, DW->data, c_rows.data(), c_cols.data(), c_b.data()};
  gemm::run(p, args.scratch);
  return {};
}

}  // namespace

extern const Kernel kernel_CONV_FPROP;
extern const Kernel kernel_CONV_DGRAD;
extern const Kernel kernel_CONV_WGRAD;
const Kernel kernel_CONV_FPROP = {check, scratch, run_fprop};
const Kernel kernel_CONV_DGRAD = {check, scratch, run_dgrad};
const Kernel kernel_CONV_WGRAD = {check, scratch, run_wgrad};

}  // namespace opendnn::ref
