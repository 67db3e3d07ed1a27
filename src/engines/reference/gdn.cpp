// SPDX-License-Identifier: Apache-2.0
// Reference kernels for the gated delta net (GDN, GDN_BACKWARD): the token-by-token recurrence of
// shared/reference/gated_delta_net.md section 1.1 in double, one (sequence, output head) per task.
//
// Conventions (shapes in src/ops/gdn.cpp):
//   Heads: HO = max(H, HV); output head j reads q head j/(HO/H), k head j/(HO/HK), v head j/(HO/HV)
//     (GVA when HV > H, the reverse when H > HV). g, beta, O and the states live at HO.
//   Per token t of a sequence and head j, with the state M (V x K, V-major as stored: M = S^T):
//     q~ = l2(q_t), k~ = l2(k_t) when use_qk_l2norm, where l2(x) = x * (sum x^2 + 1e-6)^(-1/2)
//       (fla's in-kernel form; F.normalize differs only for near-zero vectors);
//     gate: gate_domain log: alpha = exp(g); linear: alpha = g; safe_gate (log domain):
//       alpha = exp(-exp(a_log[j]) * softplus(g + dt_bias[j])) (dt_bias 0 when absent);
//     beta = b, or sigmoid(b) with use_beta_sigmoid; times 2 with allow_neg_eigval (either way);
//     M <- alpha M;  e = v_t - M k~;  M <- M + beta e k~^T;  o_t = scale * M q~   (after the write);
//     scale = attribute, default 1/sqrt(K).
//   Sequences: cu_seqlens (int32/int64) [N+1]; a zero-length sequence passes its initial state through.
//   initial_state row of sequence n: state_indices[n] when given, else n (absent: zeros).
//   final_state [N,HO,V,K] (written when bound); overwrite_initial_state also writes it back into
//   initial_state's row (sequences sharing a pool row race; don't).
//   state_checkpoints: sequence n owns rows r_n .. r_n + floor(len_n/c), r_n = sum_{m<n}(floor(len_m/c)+1);
//     row r_n + i holds the state after the first i*c tokens (i = 0: the initial state).
//   Backward: exact gradients of the above (states recomputed forward into scratch, then a reverse
//     pass carrying dM; d_final_state seeds dM). dG is w.r.t. the raw g input (through the gate fusion),
//     dBeta w.r.t. the raw beta (through the sigmoid), dQ/dK through the l2norm; dQ/dK/dV of a shared
//     head sum its output heads in ascending order; d_a_log/d_dt_bias sum over sequences in order.
//     Deterministic and independent of the thread count. state_checkpoints input is not needed.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engines/reference/family_util.h"
#include "engines/reference/kern_util.h"
#include "engines/reference/ref_kernel.h"

namespace opendnn::ref {

namespace {

using fam::in_view;
using fam::out_view;

struct Gdn {
  int64_t T = 0, H = 0, HK = 0, HV = 0, HO = 0, K = 0, V = 0, N = 0;
  const View *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr, *cu = nullptr;
  const View *init = nullptr, *idx = nullptr, *alog = nullptr, *dtb = nullptr;
  double scale = 1.0;
  bool l2 = false, sig = false, neg = false, safe = false, linear = false;

  int64_t qh(int64_t j) const { return j / (HO / H); }
  int64_t kh(int64_t j) const { return j / (HO / HK); }
  int64_t vh(int64_t j) const { return j / (HO / HV); }
  int64_t start(int64_t n) const { return int64_t(cu->get(n)); }
  int64_t end(int64_t n) const { return int64_t(cu->get(n + 1)); }
  int64_t state_row(int64_t n) const { return idx ? int64_t(idx->get(idx->strides[0] * n)) : n; }
  double at3(const View* x, int64_t t, int64_t h, int64_t d) const {
    return x->get(t * x->strides[0] + h * x->strides[1] + d * x->strides[2]);
  }
  double at2(const View* x, int64_t t, int64_t h) const { return x->get(t * x->strides[0] + h * x->strides[1]); }
  static int64_t soff(const View* s, int64_t n, int64_t j, int64_t vv, int64_t kk) {
    return n * s->strides[0] + j * s->strides[1] + vv * s->strides[2] + kk * s->strides[3];
  }
};

// One token's prepared inputs for head j, plus what the backward needs of the transforms.
struct Tok {
  std::vector<double> qn, kn, vv;
  double rq = 1, rk = 1;  // l2 factors
  double alpha = 1, beta = 1;
  double geff = 0, x = 0, b0 = 0;  // safe gate internals, raw beta's sigmoid
  explicit Tok(const Gdn& c) : qn(size_t(c.K)), kn(size_t(c.K)), vv(size_t(c.V)) {}
};

void prep(const Gdn& c, int64_t t, int64_t j, Tok& o) {
  double sq = 0, sk = 0;
  for (int64_t d = 0; d < c.K; ++d) {
    o.qn[size_t(d)] = c.at3(c.q, t, c.qh(j), d);
    o.kn[size_t(d)] = c.at3(c.k, t, c.kh(j), d);
    sq += o.qn[size_t(d)] * o.qn[size_t(d)];
    sk += o.kn[size_t(d)] * o.kn[size_t(d)];
  }
  if (c.l2) {
    o.rq = 1.0 / std::sqrt(sq + 1e-6), o.rk = 1.0 / std::sqrt(sk + 1e-6);
    for (int64_t d = 0; d < c.K; ++d) o.qn[size_t(d)] *= o.rq, o.kn[size_t(d)] *= o.rk;
  }
  for (int64_t d = 0; d < c.V; ++d) o.vv[size_t(d)] = c.at3(c.v, t, c.vh(j), d);
  const double graw = c.at2(c.g, t, j);
  if (c.safe) {
    o.x = graw + (c.dtb ? c.dtb->get(c.dtb->strides[0] * j) : 0.0);
    o.geff = -std::exp(c.alog->get(c.alog->strides[0] * j)) * fam::softplus(o.x);
    o.alpha = std::exp(o.geff);
  } else {
    o.alpha = c.linear ? graw : std::exp(graw);
  }
  const double braw = c.at2(c.beta, t, j);
  o.b0 = c.sig ? fam::sigmoid(braw) : braw;
  o.beta = (c.neg ? 2.0 : 1.0) * o.b0;
}

// One recurrence step in place: M <- alpha M + beta (v - alpha M k) k^T.
void step(const Gdn& c, const Tok& tk, double* M) {
  for (int64_t a = 0; a < c.V; ++a) {
    double* row = M + a * c.K;
    double u = 0;
    for (int64_t d = 0; d < c.K; ++d) {
      row[d] *= tk.alpha;
      u += row[d] * tk.kn[size_t(d)];
    }
    const double e = tk.vv[size_t(a)] - u;
    for (int64_t d = 0; d < c.K; ++d) row[d] += tk.beta * e * tk.kn[size_t(d)];
  }
}

Status make(const Node& n, const Args& a, Gdn& c) {
  c.q = in_view(n, a, "q"), c.k = in_view(n, a, "k"), c.v = in_view(n, a, "v");
  c.g = in_view(n, a, "g"), c.beta = in_view(n, a, "beta"), c.cu = in_view(n, a, "cu_seqlens");
  if (!c.q || !c.k || !c.v || !c.g || !c.beta || !c.cu)
    return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: q, k, v, g, beta and cu_seqlens need data");
  if (c.q->rank() != 3 || c.k->rank() != 3 || c.v->rank() != 3 || c.g->rank() != 2 || c.beta->rank() != 2)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: q/k/v must be [T,H,D] and g/beta [T,HO]");
  c.T = c.q->dims[0], c.H = c.q->dims[1], c.K = c.q->dims[2];
  c.HK = c.k->dims[1], c.HV = c.v->dims[1], c.V = c.v->dims[2];
  c.HO = std::max(c.H, c.HV);
  c.N = c.cu->volume() - 1;
  if (c.H <= 0 || c.HK <= 0 || c.HV <= 0 || c.HO % c.H || c.HO % c.HK || c.HO % c.HV || c.g->dims[1] != c.HO)
    return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "reference: head counts must divide HO = max(H, HV)");
  for (int64_t i = 0; i < c.N; ++i)
    if (c.start(i) < 0 || c.end(i) < c.start(i) || c.end(i) > c.T)
      return n.fail(ErrorCode::INVALID_VALUE, "reference: cu_seqlens must be non-decreasing within [0, T]");
  c.init = in_view(n, a, "initial_state");
  if (n.spec().input_index("state_indices") >= 0) c.idx = in_view(n, a, "state_indices");
  c.alog = in_view(n, a, "a_log"), c.dtb = in_view(n, a, "dt_bias");
  c.scale = n.has("scale") ? n.attr_float("scale") : 1.0 / std::sqrt(double(c.K));
  c.l2 = n.attr_bool("use_qk_l2norm");
  c.sig = n.attr_bool("use_beta_sigmoid");
  c.neg = n.attr_bool("allow_neg_eigval");
  c.safe = n.attr_bool("safe_gate");
  c.linear = n.attr_str("gate_domain") == "linear";
  if (c.safe && !c.alog) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: safe_gate needs a_log");
  return {};
}

// ---------------------------------------------------------------------------------------------
Status run_gdn(const Node& n, const Args& a) {
  Gdn c;
  OPENDNN_RETURN_IF_ERROR(make(n, a, c));
  const View* o = out_view(n, a, "O");
  const View* fin = out_view(n, a, "final_state");
  const View* ck = out_view(n, a, "state_checkpoints");
  const int64_t every = n.attr_int("checkpoint_every_n_tokens");
  const bool overwrite = n.attr_bool("overwrite_initial_state") && c.init;
  std::vector<int64_t> ck_base(size_t(c.N) + 1, 0);
  for (int64_t i = 0; i < c.N; ++i)
    ck_base[size_t(i) + 1] = ck_base[size_t(i)] + (every > 0 ? (c.end(i) - c.start(i)) / every + 1 : 0);

#pragma omp parallel for collapse(2) schedule(static) if (ku::parallel_worth(ku::work_of({c.T + c.N, c.HO, c.V, c.K})))
  for (int64_t s = 0; s < c.N; ++s)
    for (int64_t j = 0; j < c.HO; ++j) {
      std::vector<double> M(size_t(c.V * c.K), 0.0);
      Tok tk(c);
      const int64_t row = c.state_row(s);
      if (c.init)
        for (int64_t x = 0; x < c.V; ++x)
          for (int64_t y = 0; y < c.K; ++y) M[size_t(x * c.K + y)] = c.init->get(Gdn::soff(c.init, row, j, x, y));
      auto write_state = [&](const View* dst, int64_t r) {
        for (int64_t x = 0; x < c.V; ++x)
          for (int64_t y = 0; y < c.K; ++y) dst->set(Gdn::soff(dst, r, j, x, y), M[size_t(x * c.K + y)]);
      };
      if (ck && every > 0) write_state(ck, ck_base[size_t(s)]);
      for (int64_t t = c.start(s); t < c.end(s); ++t) {
        prep(c, t, j, tk);
        step(c, tk, M.data());
        if (o)
          for (int64_t x = 0; x < c.V; ++x) {
            double acc = 0;
            for (int64_t y = 0; y < c.K; ++y) acc += M[size_t(x * c.K + y)] * tk.qn[size_t(y)];
            o->set(t * o->strides[0] + j * o->strides[1] + x * o->strides[2], c.scale * acc);
          }
        const int64_t done = t + 1 - c.start(s);
        if (ck && every > 0 && done % every == 0) write_state(ck, ck_base[size_t(s)] + done / every);
      }
      if (fin) write_state(fin, s);
      if (overwrite) write_state(c.init, row);
    }
  return {};
}

// ---------------------------------------------------------------------------------------------
struct BwdDims {
  int64_t T = 0, HO = 0, K = 0, V = 0, N = 0;
};
BwdDims bwd_dims(const Node& n) {
  BwdDims d;
  const TensorPtr &q = n.in("q"), &v = n.in("v"), &g = n.in("g"), &cu = n.in("cu_seqlens");
  if (!q || !v || !g || !cu || q->get_dim().size() != 3 || v->get_dim().size() != 3 || g->get_dim().size() != 2)
    return d;
  d.T = q->get_dim()[0], d.K = q->get_dim()[2], d.V = v->get_dim()[2], d.HO = g->get_dim()[1];
  d.N = std::max<int64_t>(cu->volume() - 1, 0);
  return d;
}
int64_t gdn_bwd_scratch(const Node& n) {
  BwdDims d = bwd_dims(n);
  const int64_t doubles = (d.T + d.N) * d.HO * d.V * d.K + d.T * d.HO * (2 * d.K + d.V) + 2 * d.N * d.HO;
  return doubles * int64_t(sizeof(double));
}

Status run_gdn_bwd(const Node& n, const Args& a) {
  Gdn c;
  OPENDNN_RETURN_IF_ERROR(make(n, a, c));
  BwdDims bd = bwd_dims(n);
  if (bd.T != c.T || bd.HO != c.HO || bd.K != c.K || bd.V != c.V || bd.N != c.N)
    return n.fail(ErrorCode::INVALID_VALUE, "reference: dims changed since plan build");
  const View* dO = in_view(n, a, "dO");
  const View* dfin = in_view(n, a, "d_final_state");
  if (!dO) return n.fail(ErrorCode::INVALID_VARIANT_PACK, "reference: dO needs data");
  const View *dq = out_view(n, a, "dQ"), *dk = out_view(n, a, "dK"), *dv = out_view(n, a, "dV");
  const View *dg = out_view(n, a, "dG"), *db = out_view(n, a, "dBeta"), *dinit = out_view(n, a, "d_initial_state");
  const View *dalog = out_view(n, a, "d_a_log"), *ddtb = out_view(n, a, "d_dt_bias");
  const int64_t VK = c.V * c.K;
  double* states = reinterpret_cast<double*>(a.scratch);  // [(T+N), HO, V*K]: sequence s rows start+s ..
  double* sq = states + (c.T + c.N) * c.HO * VK;           // [T, HO, K] d(q~)
  double* sk = sq + c.T * c.HO * c.K;                      // [T, HO, K] d(k~)
  double* sv = sk + c.T * c.HO * c.K;                      // [T, HO, V] dv
  double* sgate = sv + c.T * c.HO * c.V;                   // [N, HO, 2] d_a_log, d_dt_bias partials
  std::fill(sq, sq + c.T * c.HO * (2 * c.K + c.V), 0.0);
  // Tokens outside every sequence get zero gradients.
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 0; j < c.HO; ++j) {
      if (dg) dg->set(t * dg->strides[0] + j * dg->strides[1], 0.0);
      if (db) db->set(t * db->strides[0] + j * db->strides[1], 0.0);
    }

#pragma omp parallel for collapse(2) schedule(static) if (ku::parallel_worth(ku::work_of({c.T + c.N, c.HO, c.V, c.K})))
  for (int64_t s = 0; s < c.N; ++s)
    for (int64_t j = 0; j < c.HO; ++j) {
      const int64_t t0 = c.start(s), len = c.end(s) - t0;
      auto st = [&](int64_t i) { return states + ((t0 + s + i) * c.HO + j) * VK; };
      Tok tk(c);
      // Forward: states M_0 .. M_len.
      double* M0 = st(0);
      std::fill(M0, M0 + VK, 0.0);
      if (c.init)
        for (int64_t x = 0; x < c.V; ++x)
          for (int64_t y = 0; y < c.K; ++y) M0[x * c.K + y] = c.init->get(Gdn::soff(c.init, s, j, x, y));
      for (int64_t i = 0; i < len; ++i) {
        std::copy(st(i), st(i) + VK, st(i + 1));
        prep(c, t0 + i, j, tk);
        step(c, tk, st(i + 1));
      }
      // Reverse.
      std::vector<double> dM(size_t(VK), 0.0), P(static_cast<size_t>(VK)), e(size_t(c.V)), de(size_t(c.V)), dqn(size_t(c.K)),
          dkn(size_t(c.K)), dOt(size_t(c.V));
      if (dfin)
        for (int64_t x = 0; x < c.V; ++x)
          for (int64_t y = 0; y < c.K; ++y) dM[size_t(x * c.K + y)] = dfin->get(Gdn::soff(dfin, s, j, x, y));
      double d_alog = 0, d_dtb = 0;
      for (int64_t i = len - 1; i >= 0; --i) {
        const int64_t t = t0 + i;
        prep(c, t, j, tk);
        const double* Mp = st(i);
        const double* Mt = st(i + 1);
        for (int64_t x = 0; x < c.V; ++x) dOt[size_t(x)] = dO->get(t * dO->strides[0] + j * dO->strides[1] + x * dO->strides[2]);
        // o = scale * M_t q~
        for (int64_t y = 0; y < c.K; ++y) {
          double acc = 0;
          for (int64_t x = 0; x < c.V; ++x) {
            acc += Mt[x * c.K + y] * dOt[size_t(x)];
            dM[size_t(x * c.K + y)] += c.scale * dOt[size_t(x)] * tk.qn[size_t(y)];
          }
          dqn[size_t(y)] = c.scale * acc;
        }
        // M_t = P + beta e k~^T, P = alpha M_{t-1}, e = v - P k~.
        double dbeta = 0;
        for (int64_t x = 0; x < c.V; ++x) {
          double u = 0, dmk = 0;
          for (int64_t y = 0; y < c.K; ++y) {
            P[size_t(x * c.K + y)] = tk.alpha * Mp[x * c.K + y];
            u += P[size_t(x * c.K + y)] * tk.kn[size_t(y)];
            dmk += dM[size_t(x * c.K + y)] * tk.kn[size_t(y)];
          }
          e[size_t(x)] = tk.vv[size_t(x)] - u;
          dbeta += e[size_t(x)] * dmk;
          de[size_t(x)] = tk.beta * dmk;
        }
        for (int64_t y = 0; y < c.K; ++y) {
          double acc = 0, acc2 = 0;
          for (int64_t x = 0; x < c.V; ++x) {
            acc += dM[size_t(x * c.K + y)] * e[size_t(x)];
            acc2 += P[size_t(x * c.K + y)] * de[size_t(x)];
          }
          dkn[size_t(y)] = tk.beta * acc - acc2;
        }
        double dalpha = 0;
        for (int64_t x = 0; x < c.V; ++x)
          for (int64_t y = 0; y < c.K; ++y) {
            double& d = dM[size_t(x * c.K + y)];
            d -= de[size_t(x)] * tk.kn[size_t(y)];  // now dP
            dalpha += d * Mp[x * c.K + y];
            d *= tk.alpha;  // now dM_{t-1}
          }
        for (int64_t y = 0; y < c.K; ++y) {
          sq[(t * c.HO + j) * c.K + y] = dqn[size_t(y)];
          sk[(t * c.HO + j) * c.K + y] = dkn[size_t(y)];
        }
        for (int64_t x = 0; x < c.V; ++x) sv[(t * c.HO + j) * c.V + x] = de[size_t(x)];
        // Gate.
        double dgraw;
        if (c.safe) {
          const double dge = dalpha * tk.alpha;
          d_alog += dge * tk.geff;
          dgraw = dge * -std::exp(c.alog->get(c.alog->strides[0] * j)) * fam::sigmoid(tk.x);
          d_dtb += dgraw;
        } else {
          dgraw = c.linear ? dalpha : dalpha * tk.alpha;
        }
        if (dg) dg->set(t * dg->strides[0] + j * dg->strides[1], dgraw);
        // Beta.
        double dbraw = dbeta * (c.neg ? 2.0 : 1.0);
        if (c.sig) dbraw *= tk.b0 * (1.0 - tk.b0);
        if (db) db->set(t * db->strides[0] + j * db->strides[1], dbraw);
      }
      if (dinit)
        for (int64_t x = 0; x < c.V; ++x)
          for (int64_t y = 0; y < c.K; ++y) dinit->set(Gdn::soff(dinit, s, j, x, y), dM[size_t(x * c.K + y)]);
      sgate[(s * c.HO + j) * 2] = d_alog;
      sgate[(s * c.HO + j) * 2 + 1] = d_dtb;
    }

  // Per token: sum the output heads of each q/k/v head, then back through the l2norm.
#pragma omp parallel for schedule(static) if (ku::parallel_worth(ku::work_of({c.T, c.HO, 2 * c.K + c.V})))
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<double> acc(size_t(std::max(c.K, c.V))), x(size_t(c.K));
    for (int which = 0; which < 3; ++which) {
      const View* out = which == 0 ? dq : which == 1 ? dk : dv;
      if (!out) continue;
      const View* in = which == 0 ? c.q : which == 1 ? c.k : c.v;
      const int64_t heads = which == 0 ? c.H : which == 1 ? c.HK : c.HV, W = which == 2 ? c.V : c.K;
      const double* src = which == 0 ? sq : which == 1 ? sk : sv;
      const int64_t G = c.HO / heads;
      for (int64_t h = 0; h < heads; ++h) {
        std::fill(acc.begin(), acc.begin() + W, 0.0);
        for (int64_t gi = 0; gi < G; ++gi)
          for (int64_t d = 0; d < W; ++d) acc[size_t(d)] += src[(t * c.HO + h * G + gi) * W + d];
        if (which < 2 && c.l2) {
          double ss = 0;
          for (int64_t d = 0; d < W; ++d) {
            x[size_t(d)] = c.at3(in, t, h, d);
            ss += x[size_t(d)] * x[size_t(d)];
          }
          const double r = 1.0 / std::sqrt(ss + 1e-6);
          double ydy = 0;
          for (int64_t d = 0; d < W; ++d) ydy += x[size_t(d)] * r * acc[size_t(d)];
          for (int64_t d = 0; d < W; ++d) acc[size_t(d)] = r * (acc[size_t(d)] - x[size_t(d)] * r * ydy);
        }
        for (int64_t d = 0; d < W; ++d) out->set(t * out->strides[0] + h * out->strides[1] + d * out->strides[2], acc[size_t(d)]);
      }
    }
  }
  for (int which = 0; which < 2; ++which) {
    const View* out = which == 0 ? dalog : ddtb;
    if (!out) continue;
    for (int64_t j = 0; j < c.HO; ++j) {
      double s = 0;
      for (int64_t i = 0; i < c.N; ++i) s += sgate[(i * c.HO + j) * 2 + which];
      out->set(out->strides[0] * j, s);
    }
  }
  return {};
}

}  // namespace

extern const Kernel kernel_GDN, kernel_GDN_BACKWARD;
const Kernel kernel_GDN = {nullptr, nullptr, run_gdn};
const Kernel kernel_GDN_BACKWARD = {nullptr, gdn_bwd_scratch, run_gdn_bwd};

}  // namespace opendnn::ref
