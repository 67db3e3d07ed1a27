// SPDX-License-Identifier: Apache-2.0
// Source generator of fused pointwise chains, and the disk cache of their cubins.
//
// Semantics follow the reference kernel (engines/reference/pointwise.cpp) mode by mode. The
// reference evaluates in double and rounds every tensor, virtual ones included, to its data type;
// the kernel evaluates in C (float, or double when a tensor is DOUBLE/INT32/INT64 or a node asks for
// DOUBLE compute, so integer chains stay exact) and rounds each produced tensor to its data type the
// same way, so a bf16 intermediate loses exactly what the reference loses.
//
// Shapes and strides are baked into the source as constants (divisions by constants are cheap and
// the cache makes a shape's second build free); scalars are kernel arguments, so a new scale value
// reuses the compiled kernel.
#include "engines/cuda/pointwise/pw_codegen.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "plan/plan_cache.h"

namespace opendnn::cuda::pw {
namespace {

using M = PointwiseMode;

struct TypeInfo {
  const char* storage;  // element type in memory
  const char* tag;      // suffix of the ld_/st_/rnd_ helpers
  int bytes;
};

bool type_info(DataType t, TypeInfo& ti) {
  switch (t) {
    case DataType::FLOAT: ti = {"float", "f32", 4}; return true;
    case DataType::DOUBLE: ti = {"double", "f64", 8}; return true;
    case DataType::HALF: ti = {"unsigned short", "f16", 2}; return true;
    case DataType::BFLOAT16: ti = {"unsigned short", "bf16", 2}; return true;
    case DataType::INT8: ti = {"signed char", "i8", 1}; return true;
    case DataType::UINT8: ti = {"unsigned char", "u8", 1}; return true;
    case DataType::INT32: ti = {"int", "i32", 4}; return true;
    case DataType::INT64: ti = {"long long", "i64", 8}; return true;
    case DataType::BOOLEAN: ti = {"unsigned char", "b8", 1}; return true;
    default: return false;
  }
}

// Conversions between storage and the compute type C, with the reference's rounding rules
// (round_to: floats round to nearest even, integers truncate and saturate, NaN -> 0, bool is != 0).
constexpr const char* kPreamble = R"(#define DEV __device__ __forceinline__
DEV C pw_inf() { return (C)__longlong_as_double(0x7ff0000000000000LL); }
DEV C pw_nan() { return (C)__longlong_as_double(0x7ff8000000000000LL); }
DEV C ld_f32(float v) { return (C)v; }
DEV float st_f32(C v) { return (float)v; }
DEV C ld_f64(double v) { return (C)v; }
DEV double st_f64(C v) { return (double)v; }
DEV C ld_f16(unsigned short v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return (C)f; }
DEV unsigned short st_f16(C v) { unsigned short h; float f = (float)v; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
DEV C ld_bf16(unsigned short v) { return (C)__uint_as_float((unsigned)v << 16); }
DEV unsigned short st_bf16(C v) { unsigned short h; float f = (float)v; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
DEV C ld_i8(signed char v) { return (C)v; }
DEV signed char st_i8(C v) { return v != v ? 0 : v <= (C)-128 ? -128 : v >= (C)127 ? 127 : (signed char)v; }
DEV C ld_u8(unsigned char v) { return (C)v; }
DEV unsigned char st_u8(C v) { return v != v ? 0 : v <= (C)0 ? 0 : v >= (C)255 ? 255 : (unsigned char)v; }
DEV C ld_i32(int v) { return (C)v; }
DEV int st_i32(C v) { return v != v ? 0 : v <= (C)-2147483648.0 ? (-2147483647 - 1) : v >= (C)2147483647.0 ? 2147483647 : (int)v; }
DEV C ld_i64(long long v) { return (C)v; }
DEV long long st_i64(C v) {
  return v != v ? 0 : v <= (C)-9223372036854775808.0 ? (-9223372036854775807LL - 1) : v >= (C)9223372036854775807.0 ? 9223372036854775807LL : (long long)v;
}
DEV C ld_b8(unsigned char v) { return v ? (C)1 : (C)0; }
DEV unsigned char st_b8(C v) { return v != (C)0 ? 1 : 0; }
#define PW_RND(tag, v) ld_##tag(st_##tag(v))
DEV C pw_max(C a, C b) { return (a != a || b != b) ? pw_nan() : (a < b ? b : a); }
DEV C pw_min(C a, C b) { return (a != a || b != b) ? pw_nan() : (b < a ? b : a); }
DEV C pw_sigmoid(C x) { return x >= (C)0 ? (C)1 / ((C)1 + PW_F(exp)(-x)) : PW_F(exp)(x) / ((C)1 + PW_F(exp)(x)); }
DEV C pw_softplus1(C x) { return x > (C)0 ? x + PW_F(log1p)(PW_F(exp)(-x)) : PW_F(log1p)(PW_F(exp)(x)); }
#define PW_SQRT2_OVER_PI ((C)0.79788456080286535587989211986876)
#define PW_INV_SQRT2 ((C)0.70710678118654752440084436210485)
#define PW_INV_SQRT2PI ((C)0.39894228040143267793994605993438)
#define PW_GELU_C ((C)0.044715)
// x * g where g -> 0 faster than x grows (g is 0 exactly at the limit): 0 with x's sign, not inf * 0.
DEV C pw_times_vanishing(C x, C g) { return (g == (C)0 && x == x) ? PW_F(copysign)((C)0, x) : x * g; }
DEV C pw_gelu(C x) { return (C)0.5 * pw_times_vanishing(x, (C)1 + PW_F(erf)(x * PW_INV_SQRT2)); }
DEV C pw_gelu_bwd(C dy, C x) {
  return dy * ((C)0.5 * ((C)1 + PW_F(erf)(x * PW_INV_SQRT2)) +
               pw_times_vanishing(x, PW_INV_SQRT2PI * PW_F(exp)((C)-0.5 * x * x)));
}
DEV C pw_gelu_tanh(C x) {
  return (C)0.5 * pw_times_vanishing(x, (C)1 + PW_F(tanh)(PW_SQRT2_OVER_PI * (x + PW_GELU_C * x * x * x)));
}
DEV C pw_gelu_tanh_bwd(C dy, C x) {
  C t = PW_F(tanh)(PW_SQRT2_OVER_PI * (x + PW_GELU_C * x * x * x));
  C sech2 = (C)1 - t * t;  // 0 exactly once |x| is large: the second term's limit is 0
  C second = (sech2 == (C)0 && x == x) ? (C)0
                                       : (C)0.5 * x * sech2 * PW_SQRT2_OVER_PI * ((C)1 + (C)3 * PW_GELU_C * x * x);
  return dy * ((C)0.5 * ((C)1 + t) + second);
}
DEV C pw_tanh_bwd(C dy, C x) { C t = PW_F(tanh)(x); return dy * ((C)1 - t * t); }
DEV C pw_sigmoid_bwd(C dy, C x) { C s = pw_sigmoid(x); return dy * s * ((C)1 - s); }
DEV C pw_swish(C x, C beta) { return pw_times_vanishing(x, pw_sigmoid(beta * x)); }
DEV C pw_swish_bwd(C dy, C x, C beta) {
  C s = pw_sigmoid(beta * x);
  C ss = s * ((C)1 - s);  // 0 exactly at the limits: beta * x * ss -> 0
  return dy * (s + ((beta == (C)0 || (ss == (C)0 && x == x)) ? (C)0 : beta * x * ss));
}
// relu with lower clip lo, upper clip hi and slope below lo; its backward (torch's selection rules at NaN).
DEV C pw_relu(C x, C lo, C hi, C slope) {
  if (x != x) return x;
  if (x <= lo) return (slope == (C)0 || x == lo) ? lo : lo + slope * (x - lo);
  return hi < x ? hi : x;
}
DEV C pw_relu_bwd(C dy, C x, C lo, C hi, C slope) {
  if (x <= lo || (x != x && slope != (C)0)) return slope == (C)0 ? (C)0 : dy * slope;
  return (x >= hi && hi < pw_inf()) ? (C)0 : dy;  // no upper clip: slope 1 up to +inf
}
struct Args { void* p[32]; double s[16]; int vec_ok; };
template <class T, int N> struct alignas(N * sizeof(T) >= 16 ? 16 : N * sizeof(T)) Pack { T v[N]; };
)";

// An exact literal of type C (hex float), or the helpers for the non-finite values.
std::string lit(double v) {
  if (std::isnan(v)) return "pw_nan()";
  if (std::isinf(v)) return v > 0 ? "pw_inf()" : "(-pw_inf())";
  char buf[64];
  std::snprintf(buf, sizeof buf, "((C)%a)", v);
  return buf;
}

double attr_or(const Node& n, const char* name, double dflt) { return n.has(name) ? n.attr_float(name) : dflt; }

// The expression of one mode over operand expressions a, b, c; `coord` is GEN_INDEX's index.
std::string mode_expr(const Node& n, const std::string& a, const std::string& b, const std::string& c,
                      const std::string& coord) {
  auto f = [](const char* fn, const std::string& x) { return std::string("PW_F(") + fn + ")(" + x + ")"; };
  auto cmp = [&](const char* op) { return "((" + a + " " + op + " " + b + ") ? (C)1 : (C)0)"; };
  switch (n.pointwise_mode()) {
    case M::ADD: return "(" + a + " + " + b + ")";
    case M::MUL: return "(" + a + " * " + b + ")";
    case M::SUB: return "(" + a + " - " + b + ")";
    case M::DIV: return "(" + a + " / " + b + ")";
    case M::ADD_SQUARE: return "(" + a + " + " + b + " * " + b + ")";
    case M::MAX: return "pw_max(" + a + ", " + b + ")";
    case M::MIN: return "pw_min(" + a + ", " + b + ")";
    case M::MOD: return "PW_F(fmod)(" + a + ", " + b + ")";
    case M::POW: return "PW_F(pow)(" + a + ", " + b + ")";
    case M::NEG: return "(-" + a + ")";
    case M::ABS: return f("fabs", a);
    case M::RECIPROCAL: return "((C)1 / " + a + ")";
    case M::IDENTITY: return a;
    case M::SQRT: return f("sqrt", a);
    case M::RSQRT: return "((C)1 / " + f("sqrt", a) + ")";  // 1/sqrt as the reference, not the approximate rsqrt
    case M::EXP: return f("exp", a);
    case M::LOG: return f("log", a);
    case M::ERF: return f("erf", a);
    case M::SIN: return f("sin", a);
    case M::COS: return f("cos", a);
    case M::TAN: return f("tan", a);
    case M::CEIL: return f("ceil", a);
    case M::FLOOR: return f("floor", a);
    case M::RELU_FWD:
    case M::RELU_BWD: {
      const std::string lo = lit(attr_or(n, "relu_lower_clip", 0.0));
      const std::string hi = lit(attr_or(n, "relu_upper_clip", INFINITY));
      const std::string slope = lit(attr_or(n, "relu_lower_clip_slope", 0.0));
      if (n.pointwise_mode() == M::RELU_FWD) return "pw_relu(" + a + ", " + lo + ", " + hi + ", " + slope + ")";
      return "pw_relu_bwd(" + a + ", " + b + ", " + lo + ", " + hi + ", " + slope + ")";
    }
    case M::TANH_FWD: return f("tanh", a);
    case M::TANH_BWD: return "pw_tanh_bwd(" + a + ", " + b + ")";
    case M::SIGMOID_FWD: return "pw_sigmoid(" + a + ")";
    case M::SIGMOID_BWD: return "pw_sigmoid_bwd(" + a + ", " + b + ")";
    case M::ELU_FWD: return "(" + a + " > (C)0 ? " + a + " : " + lit(attr_or(n, "elu_alpha", 1.0)) + " * " + f("expm1", a) + ")";
    case M::ELU_BWD:
      return "(" + a + " * (" + b + " <= (C)0 ? " + lit(attr_or(n, "elu_alpha", 1.0)) + " * " + f("exp", b) + " : (C)1))";
    case M::GELU_FWD: return "pw_gelu(" + a + ")";
    case M::GELU_BWD: return "pw_gelu_bwd(" + a + ", " + b + ")";
    case M::GELU_APPROX_TANH_FWD: return "pw_gelu_tanh(" + a + ")";
    case M::GELU_APPROX_TANH_BWD: return "pw_gelu_tanh_bwd(" + a + ", " + b + ")";
    case M::SOFTPLUS_FWD: {
      const std::string beta = lit(attr_or(n, "softplus_beta", 1.0));
      return "(pw_softplus1(" + beta + " * " + a + ") / " + beta + ")";
    }
    case M::SOFTPLUS_BWD: return "(" + a + " * pw_sigmoid(" + lit(attr_or(n, "softplus_beta", 1.0)) + " * " + b + "))";
    case M::SWISH_FWD: return "pw_swish(" + a + ", " + lit(attr_or(n, "swish_beta", 1.0)) + ")";
    case M::SWISH_BWD: return "pw_swish_bwd(" + a + ", " + b + ", " + lit(attr_or(n, "swish_beta", 1.0)) + ")";
    case M::CMP_EQ: return cmp("==");
    case M::CMP_NEQ: return cmp("!=");
    case M::CMP_GT: return cmp(">");
    case M::CMP_GE: return cmp(">=");
    case M::CMP_LT: return cmp("<");
    case M::CMP_LE: return cmp("<=");
    case M::LOGICAL_AND: return "((" + a + " != (C)0 && " + b + " != (C)0) ? (C)1 : (C)0)";
    case M::LOGICAL_OR: return "((" + a + " != (C)0 || " + b + " != (C)0) ? (C)1 : (C)0)";
    case M::LOGICAL_NOT: return "(" + a + " == (C)0 ? (C)1 : (C)0)";
    case M::GEN_INDEX: return "((C)" + coord + ")";
    case M::BINARY_SELECT: return "(" + c + " != (C)0 ? " + a + " : " + b + ")";
  }
  return "pw_nan()";
}

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

// A tensor the kernel reads or writes, with its strides broadcast to the iteration space.
struct Operand {
  const TensorAttr* t;
  TypeInfo ti;
  std::vector<int64_t> strides;
  char access = 's';  // vector path: 'v' packed vector, 'b' broadcast along the last dim, 'g' gather
};

class Generator {
 public:
  explicit Generator(const Graph& g) : g_(g) {}

  std::string run(Chain& out) {
    if (std::string why = order_nodes(); !why.empty()) return why;
    if (std::string why = classify(); !why.empty()) return why;
    if (std::string why = broadcast_all(); !why.empty()) return why;
    collapse_dims();
    choose_vector();
    emit(out);
    return "";
  }

 private:
  const Graph& g_;
  std::vector<const Node*> order_;
  std::vector<Operand> ins_, outs_;
  std::vector<const TensorAttr*> scalars_;
  std::vector<ScalarArg> scalar_args_;
  std::map<const TensorAttr*, std::string> name_;
  std::vector<int64_t> dims_;
  bool gen_index_ = false;
  bool wide_ = false;
  bool double_compute_ = false;
  int vec_ = 1;

  static std::string tname(const TensorAttr* t) { return "'" + t->get_name() + "'"; }

  std::string order_nodes() {
    if (g_.nodes().empty()) return "the graph has no nodes";
    std::set<const TensorAttr*> produced, done;
    for (const auto& n : g_.nodes()) {
      if (n->kind() != OpKind::POINTWISE) return "node '" + n->name() + "' is not POINTWISE";
      for (const auto& t : n->outputs())
        if (t) produced.insert(t.get());
    }
    // Kahn-style: a node runs once every input it reads is a graph input or already computed.
    std::vector<const Node*> left;
    for (const auto& n : g_.nodes()) left.push_back(n.get());
    while (!left.empty()) {
      size_t before = left.size();
      for (size_t i = 0; i < left.size();) {
        bool ready = true;
        for (const auto& t : left[i]->inputs())
          if (t && produced.count(t.get()) && !done.count(t.get())) ready = false;
        if (!ready) {
          ++i;
          continue;
        }
        for (const auto& t : left[i]->outputs())
          if (t) done.insert(t.get());
        order_.push_back(left[i]);
        left.erase(left.begin() + long(i));
      }
      if (left.size() == before) return "the pointwise nodes form a cycle";
    }
    return "";
  }

  std::string check_type(const TensorAttr* t, TypeInfo& ti) {
    if (!type_info(t->get_data_type(), ti))
      return "tensor " + tname(t) + " has data type " + std::string(to_string(t->get_data_type())) +
             ", which the fused pointwise kernel does not support";
    DataType d = t->get_data_type();
    if (d == DataType::DOUBLE || d == DataType::INT32 || d == DataType::INT64) double_compute_ = true;
    return "";
  }

  std::string classify() {
    std::set<const TensorAttr*> produced;
    for (const Node* n : order_)
      for (const auto& t : n->outputs())
        if (t) produced.insert(t.get());
    for (const Node* n : order_) {
      const DataType ct = n->compute_data_type() != DataType::NOT_SET ? n->compute_data_type() : g_.context().compute_data_type;
      if (ct == DataType::DOUBLE) double_compute_ = true;
      const bool gen = n->pointwise_mode() == M::GEN_INDEX;
      gen_index_ = gen_index_ || gen;
      for (const auto& tp : n->inputs()) {
        const TensorAttr* t = tp.get();
        if (!t || gen || name_.count(t) || produced.count(t)) continue;  // GEN_INDEX reads only IN_0's shape
        TypeInfo ti{};
        if (std::string why = check_type(t, ti); !why.empty()) return why;
        if (t->get_is_pass_by_value()) {
          if (int(scalars_.size()) == kMaxScalars) return "more than 16 scalar inputs";
          ScalarArg s;
          s.type = t->get_data_type();
          s.slot = t->get_value().is_set() ? -1 : g_.variant_slot_of(t->get_uid());
          s.constant = t->get_value().as_double();
          name_[t] = "s" + std::to_string(scalars_.size());
          scalars_.push_back(t);
          scalar_args_.push_back(s);
          continue;
        }
        if (t->get_is_virtual()) return "input " + tname(t) + " is virtual but no node produces it";
        name_[t] = "x" + std::to_string(ins_.size());
        ins_.push_back({t, ti, {}});
      }
      for (const auto& tp : n->outputs()) {
        const TensorAttr* t = tp.get();
        if (!t) continue;
        TypeInfo ti{};
        if (!t->get_is_virtual() || t->get_data_type() != DataType::NOT_SET)
          if (std::string why = check_type(t, ti); !why.empty()) return why;
        name_[t] = "t" + std::to_string(name_.size());
        if (!t->get_is_virtual()) outs_.push_back({t, ti, {}});
      }
    }
    if (outs_.empty()) return "the chain has no non-virtual output";
    if (ins_.size() + outs_.size() > size_t(kMaxTensors)) return "more than 32 tensors in the chain";
    return "";
  }

  // Strides that read t broadcast to dims_ (0 where t repeats), or false when it does not broadcast.
  bool bcast(const TensorAttr* t, std::vector<int64_t>& s) const {
    const auto& d = t->get_dim();
    const auto& st = t->get_stride();
    if (d.size() > dims_.size() || st.size() != d.size()) return false;
    s.assign(dims_.size(), 0);
    for (size_t i = 0; i < d.size(); ++i) {
      size_t di = dims_.size() - 1 - i, ti = d.size() - 1 - i;
      if (d[ti] != dims_[di] && d[ti] != 1) return false;
      if (st[ti] < 0) return false;
      s[di] = d[ti] == 1 ? 0 : st[ti];
    }
    return true;
  }

  std::string broadcast_all() {
    for (const auto& o : outs_)
      if (o.t->get_dim().size() > dims_.size()) dims_ = o.t->get_dim();
    for (const auto& o : outs_) {
      const auto& d = o.t->get_dim();
      for (size_t i = 0; i < d.size(); ++i)
        if (d[d.size() - 1 - i] != dims_[dims_.size() - 1 - i])
          return "outputs " + tname(outs_[0].t) + " " + dims_text(dims_) + " and " + tname(o.t) + " " + dims_text(d) +
                 " differ in shape (every non-virtual output must cover the whole chain)";
    }
    for (auto* ops : {&ins_, &outs_})
      for (auto& o : *ops)
        if (!bcast(o.t, o.strides))
          return "tensor " + tname(o.t) + " " + dims_text(o.t->get_dim()) + " does not broadcast to the outputs' " +
                 dims_text(dims_) + " with non-negative strides";
    for (const Node* n : order_)
      for (const auto& t : n->outputs()) {
        std::vector<int64_t> unused;
        if (t && t->get_is_virtual() && !bcast(t.get(), unused))
          return "intermediate " + tname(t.get()) + " " + dims_text(t->get_dim()) + " is larger than the outputs " +
                 dims_text(dims_);
      }
    int64_t elements = 1, reach = 1;
    for (int64_t d : dims_) elements *= d;
    for (auto* ops : {&ins_, &outs_})
      for (auto& o : *ops) {
        int64_t r = 1;
        for (size_t i = 0; i < dims_.size(); ++i) r += (dims_[i] > 0 ? dims_[i] - 1 : 0) * o.strides[i];
        reach = std::max(reach, r);
      }
    wide_ = std::max(elements, reach) >= (int64_t(1) << 31) - 64;
    return "";
  }

  // Drops dims of 1 and merges neighbours that every operand walks contiguously, so the index math
  // has as few divisions as the layout allows. GEN_INDEX needs the original axes, so it keeps them.
  void collapse_dims() {
    if (gen_index_) return;
    std::vector<int64_t> nd;
    std::vector<std::vector<int64_t>> ns(ins_.size() + outs_.size());
    auto op = [&](size_t k) -> Operand& { return k < ins_.size() ? ins_[k] : outs_[k - ins_.size()]; };
    for (size_t i = 0; i < dims_.size(); ++i) {
      if (dims_[i] == 1) continue;
      bool merge = !nd.empty();
      for (size_t k = 0; merge && k < ns.size(); ++k) merge = ns[k].back() == op(k).strides[i] * dims_[i];
      if (merge) {
        nd.back() *= dims_[i];
        for (size_t k = 0; k < ns.size(); ++k) ns[k].back() = op(k).strides[i];
      } else {
        nd.push_back(dims_[i]);
        for (size_t k = 0; k < ns.size(); ++k) ns[k].push_back(op(k).strides[i]);
      }
    }
    dims_ = nd;
    for (size_t k = 0; k < ns.size(); ++k) op(k).strides = ns[k];
  }

  // Elements per iteration of the vector path: 16 bytes of the narrowest contiguous operand.
  void choose_vector() {
    vec_ = 1;
    if (dims_.empty()) return;
    const int64_t inner = dims_.back();
    int narrow = 0;
    for (auto* ops : {&ins_, &outs_})
      for (auto& o : *ops)
        if (o.strides.back() == 1 && (!narrow || o.ti.bytes < narrow)) narrow = o.ti.bytes;
    if (!narrow) return;
    int v = std::min(8, 16 / narrow);
    while (v > 1 && inner % v) v /= 2;
    if (v == 1) return;
    vec_ = v;
    for (auto* ops : {&ins_, &outs_})
      for (auto& o : *ops) {
        const int64_t s = o.strides.back();
        bool aligned = s == 1;
        for (size_t i = 0; aligned && i + 1 < o.strides.size(); ++i) aligned = o.strides[i] % v == 0;
        o.access = aligned ? 'v' : (s == 0 ? 'b' : 'g');
      }
  }

  std::string unravel(const std::string& e) const {
    std::string s = "      I r = " + e + ";\n";
    for (size_t k = dims_.size(); k-- > 0;) {
      const std::string c = "c" + std::to_string(k), d = std::to_string(dims_[k]);
      if (k == 0) s += "      const I " + c + " = r;\n";
      else s += "      const I " + c + " = r % " + d + "; r /= " + d + ";\n";
    }
    return s + "      (void)r;\n";
  }

  std::string offset(const Operand& o) const {
    std::string s;
    for (size_t k = 0; k < dims_.size(); ++k)
      if (o.strides[k]) s += (s.empty() ? "" : " + ") + std::string("c") + std::to_string(k) + " * (I)" + std::to_string(o.strides[k]);
    return s.empty() ? "(I)0" : s;
  }

  // The chain's statements; `lane` adds the vector lane to the last coordinate (GEN_INDEX).
  std::string body(bool lane) const {
    std::string s;
    for (const Node* n : order_) {
      std::string arg[3];
      for (size_t i = 0; i < 3 && i < n->inputs().size(); ++i)
        if (const auto& t = n->inputs()[i]; t && name_.count(t.get())) arg[i] = name_.at(t.get());
      std::string coord = "0";
      const TensorAttr* y = n->outputs()[0].get();
      if (n->pointwise_mode() == M::GEN_INDEX) {
        const auto& od = y->get_dim();
        const size_t ax = size_t(n->attr_int("axis"));
        const size_t dax = ax + dims_.size() - od.size();
        if (od[ax] != 1) coord = (lane && dax + 1 == dims_.size()) ? "(c" + std::to_string(dax) + " + (I)l)" : "c" + std::to_string(dax);
      }
      std::string e = mode_expr(*n, arg[0], arg[1], arg[2], coord);
      TypeInfo ti{};
      if (type_info(y->get_data_type(), ti)) e = std::string("PW_RND(") + ti.tag + ", " + e + ")";
      s += "        const C " + name_.at(y) + " = " + e + ";\n";
    }
    return s;
  }

  void emit(Chain& out) {
    std::ostringstream o;
    o << "// opendnn fused pointwise chain (generated)\n";
    if (double_compute_) o << "typedef double C;\n#define PW_F(fn) fn\n";
    else o << "typedef float C;\n#define PW_F(fn) fn##f\n";
    o << (wide_ ? "typedef unsigned long long I;\n" : "typedef unsigned int I;\n") << kPreamble;
    int64_t elements = 1;
    for (int64_t d : dims_) elements *= d;
    o << "extern \"C\" __global__ void __launch_bounds__(256) " << kKernelName << "(const Args a) {\n";
    o << "  const I tid = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x, nth = (I)gridDim.x * (I)blockDim.x;\n";
    for (size_t k = 0; k < scalars_.size(); ++k) o << "  const C s" << k << " = (C)a.s[" << k << "];\n";
    for (size_t k = 0; k < ins_.size(); ++k)
      o << "  const " << ins_[k].ti.storage << "* __restrict__ p" << k << " = (const " << ins_[k].ti.storage << "*)a.p[" << k << "];\n";
    for (size_t k = 0; k < outs_.size(); ++k)
      o << "  " << outs_[k].ti.storage << "* __restrict__ q" << k << " = (" << outs_[k].ti.storage << "*)a.p["
        << ins_.size() + k << "];\n";
    auto stride_last = [](const Operand& op) { return std::to_string(op.strides.back()); };
    if (vec_ > 1) {
      const std::string V = std::to_string(vec_);
      o << "  if (a.vec_ok) {\n    for (I q = tid; q < (I)" << elements / vec_ << "; q += nth) {\n";
      o << unravel("q * (I)" + V);
      for (size_t k = 0; k < ins_.size(); ++k) {
        const Operand& op = ins_[k];
        o << "      const I o" << k << " = " << offset(op) << ";\n";
        if (op.access == 'v')
          o << "      const Pack<" << op.ti.storage << ", " << V << "> v" << k << " = *(const Pack<" << op.ti.storage << ", " << V
            << ">*)(p" << k << " + o" << k << ");\n";
        if (op.access == 'b') o << "      const C b" << k << " = ld_" << op.ti.tag << "(p" << k << "[o" << k << "]);\n";
      }
      for (size_t k = 0; k < outs_.size(); ++k) {
        o << "      const I u" << k << " = " << offset(outs_[k]) << ";\n";
        if (outs_[k].access == 'v') o << "      Pack<" << outs_[k].ti.storage << ", " << V << "> w" << k << ";\n";
      }
      o << "#pragma unroll\n      for (int l = 0; l < " << V << "; ++l) {\n";
      for (size_t k = 0; k < ins_.size(); ++k) {
        const Operand& op = ins_[k];
        o << "        const C x" << k << " = ";
        if (op.access == 'v') o << "ld_" << op.ti.tag << "(v" << k << ".v[l]);\n";
        else if (op.access == 'b') o << "b" << k << ";\n";
        else o << "ld_" << op.ti.tag << "(p" << k << "[o" << k << " + (I)l * (I)" << stride_last(op) << "]);\n";
      }
      o << body(true);
      for (size_t k = 0; k < outs_.size(); ++k) {
        const Operand& op = outs_[k];
        const std::string val = "st_" + std::string(op.ti.tag) + "(" + name_.at(op.t) + ")";
        if (op.access == 'v') o << "        w" << k << ".v[l] = " << val << ";\n";
        else o << "        q" << k << "[u" << k << " + (I)l * (I)" << stride_last(op) << "] = " << val << ";\n";
      }
      o << "      }\n";
      for (size_t k = 0; k < outs_.size(); ++k)
        if (outs_[k].access == 'v')
          o << "      *(Pack<" << outs_[k].ti.storage << ", " << V << ">*)(q" << k << " + u" << k << ") = w" << k << ";\n";
      o << "    }\n    return;\n  }\n";
    }
    o << "  for (I e = tid; e < (I)" << elements << "; e += nth) {\n" << unravel("e");
    for (size_t k = 0; k < ins_.size(); ++k)
      o << "      const C x" << k << " = ld_" << ins_[k].ti.tag << "(p" << k << "[" << offset(ins_[k]) << "]);\n";
    o << body(false);
    for (size_t k = 0; k < outs_.size(); ++k)
      o << "      q" << k << "[" << offset(outs_[k]) << "] = st_" << outs_[k].ti.tag << "(" << name_.at(outs_[k].t) << ");\n";
    o << "  }\n}\n";

    out = Chain{};
    out.dims = dims_;
    out.elements = elements;
    out.vec = vec_;
    out.scalars = scalar_args_;
    for (const auto& op : ins_) {
      out.in_slots.push_back(g_.variant_slot_of(op.t->get_uid()));
      out.vector_access.push_back(op.access == 'v');
      out.names.push_back(op.t->get_name());
    }
    for (const auto& op : outs_) {
      out.out_slots.push_back(g_.variant_slot_of(op.t->get_uid()));
      out.vector_access.push_back(op.access == 'v');
      out.names.push_back(op.t->get_name());
    }
    out.source = o.str();
  }
};

uint64_t fnv1a(const std::string& s, uint64_t h) {
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

constexpr char kMagic[8] = {'O', 'D', 'N', 'N', 'K', 'B', '0', '1'};

}  // namespace

std::string generate(const Graph& graph, Chain& out) { return Generator(graph).run(out); }

std::string cache_key(const std::string& source, const std::string& arch, int nvrtc_version) {
  const std::string all = source + '\n' + arch + '\n' + std::to_string(nvrtc_version);
  char buf[40];
  // Two FNV-1a streams with different offsets: 128 bits keep accidental collisions out of reach.
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)fnv1a(all, 1469598103934665603ull),
                (unsigned long long)fnv1a(all, 0x9e3779b97f4a7c15ull));
  return buf;
}

std::string cache_dir() {
  std::string d = plan_cache::cache_dir();
  return d.empty() ? d : d + "/kernels";
}

// File layout: magic, 8-byte payload size, 8-byte FNV-1a of the payload, payload. The size and
// checksum catch truncated or overwritten files, which then count as a miss.
bool cache_read(const std::string& dir, const std::string& key, std::string& binary) {
  if (dir.empty()) return false;
  std::ifstream f(dir + "/" + key + ".cubin", std::ios::binary);
  if (!f) return false;
  char magic[8];
  uint64_t size = 0, sum = 0;
  if (!f.read(magic, 8) || std::string(magic, 8) != std::string(kMagic, 8)) return false;
  if (!f.read(reinterpret_cast<char*>(&size), 8) || !f.read(reinterpret_cast<char*>(&sum), 8)) return false;
  if (size == 0 || size > (uint64_t(1) << 30)) return false;
  std::string data(size, '\0');
  if (!f.read(data.data(), std::streamsize(size)) || f.peek() != std::char_traits<char>::eof()) return false;
  if (fnv1a(data, 1469598103934665603ull) != sum) return false;
  binary = std::move(data);
  return true;
}

bool cache_write(const std::string& dir, const std::string& key, const std::string& binary) {
  if (dir.empty()) return false;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return false;
  static std::atomic<uint64_t> seq{0};
  const std::string path = dir + "/" + key + ".cubin";
  const std::string tmp = path + ".tmp" + std::to_string(::getpid()) + "_" + std::to_string(seq++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    const uint64_t size = binary.size(), sum = fnv1a(binary, 1469598103934665603ull);
    f.write(kMagic, 8);
    f.write(reinterpret_cast<const char*>(&size), 8);
    f.write(reinterpret_cast<const char*>(&sum), 8);
    f.write(binary.data(), std::streamsize(binary.size()));
    if (!f.flush()) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (!ec) return true;
  std::filesystem::remove(tmp, ec);
  return false;
}

}  // namespace opendnn::cuda::pw
