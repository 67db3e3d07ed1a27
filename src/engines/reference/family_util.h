// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the reference kernels of the norm, sdpa, gdn and causal_conv1d families:
// port lookup by name, scalar reads, and splitting a tensor's axes into an outer and an inner set.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engines/reference/ref_kernel.h"

namespace opendnn::ref::fam {

// The view on an input/output port, or null when the port is absent or carries no data.
inline const View* in_view(const Node& n, const Args& a, const char* port) {
  int i = n.spec().input_index(port);
  if (i < 0 || size_t(i) >= a.in.size()) return nullptr;
  const View& v = a.in[size_t(i)];
  if (v.present()) return &v;
  return nullptr;
}
inline const View* out_view(const Node& n, const Args& a, const char* port) {
  int i = n.spec().output_index(port);
  if (i < 0 || size_t(i) >= a.out.size()) return nullptr;
  const View& v = a.out[size_t(i)];
  // A zero-size output (an optional output the configuration does not produce) is absent.
  return v.present() && (v.dims.empty() || v.volume() > 0) ? &v : nullptr;
}
// The tensor attributes on a port (independent of data), or null.
inline const TensorAttr* in_attr(const Node& n, const char* port) {
  const TensorPtr& t = n.in(port);
  return t ? t.get() : nullptr;
}

// A scalar input (epsilon, momentum, attn_scale, seed...): element 0 of the view, else the
// pass-by-value value of the port's tensor, else `dflt`.
inline double scalar_in(const Node& n, const Args& a, const char* port, double dflt) {
  if (const View* v = in_view(n, a, port)) return v->get(0);
  if (const TensorAttr* t = in_attr(n, port); t && t->get_is_pass_by_value() && t->get_value().is_set())
    return t->get_value().as_double();
  return dflt;
}
inline bool has_scalar(const Node& n, const Args& a, const char* port) {
  if (in_view(n, a, port)) return true;
  const TensorAttr* t = in_attr(n, port);
  return t && t->get_is_pass_by_value() && t->get_value().is_set();
}
// An integer scalar input read at full int64 precision when passed by value.
inline int64_t int_scalar_in(const Node& n, const Args& a, const char* port, int64_t dflt) {
  if (const View* v = in_view(n, a, port)) {
    if (v->dtype == DataType::INT64) return static_cast<const int64_t*>(v->data)[0];
    return int64_t(v->get(0));
  }
  if (const TensorAttr* t = in_attr(n, port); t && t->get_is_pass_by_value() && t->get_value().is_set()) {
    const Scalar& s = t->get_value();
    return is_integer(s.type) ? s.i : int64_t(s.f);
  }
  return dflt;
}

// The ragged-offset data of the tensor on a port (null when it has none or no data). Convention
// (ref_kernel.h, Args): after the op's input ports, args.in holds one View per port whose tensor has
// a ragged offset, input ports first then output ports, in port order.
inline const View* ragged_view(const Node& n, const Args& a, bool output, const char* port) {
  size_t slot = n.inputs().size();
  auto scan = [&](const std::vector<TensorPtr>& ts, bool is_out, int want) -> const View* {
    for (size_t i = 0; i < ts.size(); ++i) {
      if (!ts[i] || !ts[i]->get_ragged_offset()) continue;
      if (is_out == output && int(i) == want) return slot < a.in.size() && a.in[slot].present() ? &a.in[slot] : nullptr;
      ++slot;
    }
    return nullptr;
  };
  int want = output ? n.spec().output_index(port) : n.spec().input_index(port);
  if (want < 0) return nullptr;
  if (const View* v = scan(n.inputs(), false, want)) return v;
  if (output) return scan(n.outputs(), true, want);
  return nullptr;
}

// Splits the axes of `dims` into outer (the rows) and inner (the reduced/normalised set) and maps
// (outer linear index, inner linear index) to a full index, row-major in each set.
struct AxisSplit {
  std::vector<int64_t> dims;
  std::vector<int> outer, inner;
  int64_t n_outer = 1, n_inner = 1;

  AxisSplit(const std::vector<int64_t>& d, const std::vector<bool>& is_outer) : dims(d) {
    for (size_t i = 0; i < d.size(); ++i) {
      if (is_outer[i]) { outer.push_back(int(i)); n_outer *= d[i]; }
      else { inner.push_back(int(i)); n_inner *= d[i]; }
    }
  }
  // (A zero-size axis has no index: it maps to 0, and the caller's loop over it runs zero times.)
  void index(int64_t o, int64_t in, int64_t* idx) const {
    auto split = [&](const std::vector<int>& axes, int64_t lin) {
      for (size_t k = axes.size(); k-- > 0;) {
        const int64_t d = dims[size_t(axes[k])];
        idx[axes[k]] = d ? lin % d : 0;
        lin = d ? lin / d : 0;
      }
    };
    split(outer, o);
    split(inner, in);
  }
};

inline double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
inline double softplus(double x) { return x > 30 ? x : std::log1p(std::exp(x)); }

}  // namespace opendnn::ref::fam
