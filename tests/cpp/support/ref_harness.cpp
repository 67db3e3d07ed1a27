// SPDX-License-Identifier: Apache-2.0
#include "support/ref_harness.h"

#include <cmath>
#include <cstring>
#include <random>

namespace opendnn::test {

int64_t volume(const std::vector<int64_t>& dims) {
  int64_t v = 1;
  for (int64_t d : dims) v *= d;
  return v;
}

Status RefRunner::validate() {
  if (validated_ && g_.is_validated()) return {};
  Status s = g_.validate();
  validated_ = s.is_good();
  return s;
}

std::vector<std::byte>& RefRunner::bytes(const TensorPtr& t) {
  auto it = mem_.find(t.get());
  if (it != mem_.end()) return it->second;
  int64_t elems = 1;
  const auto& d = t->get_dim();
  const auto& s = t->get_stride();
  for (size_t i = 0; i < d.size() && i < s.size(); ++i)
    if (d[i] > 0) elems += (d[i] - 1) * s[i];
  int bits = bits_of(t->get_data_type());
  if (bits <= 0) bits = 64;
  size_t nbytes = size_t((elems * bits + 7) / 8) + 8;
  auto& buf = mem_[t.get()];
  buf.assign(nbytes, std::byte{0});
  if (t->get_is_pass_by_value()) {
    const Scalar& v = t->get_value();
    switch (t->get_data_type()) {
      case DataType::INT64: std::memcpy(buf.data(), &v.i, 8); break;
      case DataType::INT32: { int32_t x = int32_t(v.i); std::memcpy(buf.data(), &x, 4); break; }
      default: store_element(t->get_data_type(), buf.data(), 0, v.as_double());
    }
  }
  return buf;
}

void RefRunner::fill_bytes(const TensorPtr& t, unsigned char b) {
  auto& m = bytes(t);
  std::memset(m.data(), b, m.size());
}

ref::View RefRunner::view_of(const TensorPtr& t) {
  ref::View v;
  if (!t) return v;
  v.attr = t.get();
  v.dtype = t->get_data_type();
  v.dims = t->get_dim();
  v.strides = t->get_stride();
  if (v.strides.empty()) v.strides = row_major_strides(v.dims);
  v.data = bytes(t).data();
  return v;
}

void RefRunner::set(const TensorPtr& t, const std::vector<double>& values) {
  if (t->get_stride().empty()) (void)validate();
  ref::View v = view_of(t);
  ref::for_each_index(v.dims, [&](const int64_t* idx, int64_t lin) {
    if (size_t(lin) < values.size()) v.set(v.offset_of(idx), values[size_t(lin)]);
  });
}

std::vector<double> RefRunner::get(const TensorPtr& t) {
  ref::View v = view_of(t);
  std::vector<double> out;
  out.reserve(size_t(volume(v.dims)));
  ref::for_each_index(v.dims, [&](const int64_t* idx, int64_t) { out.push_back(v.get(v.offset_of(idx))); });
  return out;
}

ref::Args RefRunner::args_for(const Node& n) {
  ref::Args a;
  for (const TensorPtr& t : n.inputs()) a.in.push_back(view_of(t));
  for (const TensorPtr& t : n.outputs()) a.out.push_back(view_of(t));
  return a;
}

Status RefRunner::run(const Node& n) {
  OPENDNN_RETURN_IF_ERROR(validate());
  const ref::Kernel* k = ref::kernel_for(n.kind());
  if (!k) return n.fail(ErrorCode::GRAPH_NOT_SUPPORTED, "no reference kernel linked in");
  if (k->check) OPENDNN_RETURN_IF_ERROR(k->check(n));
  ref::Args a = args_for(n);
  int64_t sb = k->scratch_bytes ? k->scratch_bytes(n) : 0;
  scratch_.assign(size_t(sb) + 64, std::byte{0});
  auto p = reinterpret_cast<uintptr_t>(scratch_.data());
  a.scratch = scratch_.data() + ((64 - p % 64) % 64);
  return k->run(n, a);
}

Status RefRunner::run_all() {
  OPENDNN_RETURN_IF_ERROR(validate());
  for (const auto& n : g_.nodes()) OPENDNN_RETURN_IF_ERROR(run(*n));
  return {};
}

std::vector<double> random_values(size_t n, uint64_t seed, double lo, double hi, DataType t) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = round_to(t, dist(rng));
  return v;
}

double max_rel_violation(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    double e = std::abs(got[i] - want[i]) / (atol + rtol * std::abs(want[i]));
    if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
  }
  return worst;
}

Status build_reference(Graph& g) {
  OPENDNN_RETURN_IF_ERROR(g.validate());
  OPENDNN_RETURN_IF_ERROR(g.create_execution_plans({HeurMode::FALLBACK}));
  OPENDNN_RETURN_IF_ERROR(g.check_support());
  return g.build_plans();
}

}  // namespace opendnn::test
