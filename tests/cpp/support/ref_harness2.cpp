// SPDX-License-Identifier: Apache-2.0
#include "support/ref_harness2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include <omp.h>

#include "common/dtype_convert.h"
#include "engines/reference/kern_util.h"

namespace opendnn::test2 {

namespace {
int g_threads = 1;
}
void set_threads(int n) {
  g_threads = n;
  // Test problems are tiny: with more than one thread, parallelise every region regardless of size.
  ref::ku::set_parallel_min_work(n > 1 ? 0 : ref::ku::kParallelMinWork);
}

int64_t volume(const std::vector<int64_t>& d) {
  int64_t v = 1;
  for (int64_t x : d) v *= x;
  return v;
}

int64_t Buf::elements() const {
  int64_t m = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0) return 0;
    m += (dims[i] - 1) * strides[i];
  }
  return m + 1;
}
int64_t Buf::offset(const std::vector<int64_t>& idx) const {
  int64_t o = 0;
  for (size_t i = 0; i < dims.size(); ++i) o += idx[i] * strides[i];
  return o;
}
double Buf::at(const std::vector<int64_t>& idx) const { return load_element(dtype, storage.data(), offset(idx)); }
void Buf::put(const std::vector<int64_t>& idx, double v) { store_element(dtype, storage.data(), offset(idx), v); }
std::vector<double> Buf::values() const {
  std::vector<double> r;
  r.reserve(size_t(volume(dims)));
  ref::for_each_index(dims, [&](const int64_t* idx, int64_t) {
    r.push_back(load_element(dtype, storage.data(), ref::View{nullptr, dtype, dims, strides, nullptr}.offset_of(idx)));
  });
  return r;
}
void Buf::set_values(const std::vector<double>& v) {
  ref::View view{nullptr, dtype, dims, strides, storage.data()};
  ref::for_each_index(dims, [&](const int64_t* idx, int64_t lin) {
    if (size_t(lin) < v.size()) view.set(view.offset_of(idx), v[size_t(lin)]);
  });
}

namespace {
Buf make_buf(std::vector<int64_t> dims, std::vector<int64_t> strides, DataType dt) {
  Buf b;
  b.dims = std::move(dims);
  b.strides = strides.empty() ? row_major_strides(b.dims) : std::move(strides);
  b.dtype = dt;
  b.storage.assign(size_t(std::max<int64_t>(b.elements(), 1)), 0);
  b.attr = std::make_shared<TensorAttr>();
  b.attr->set_dim(b.dims).set_stride(b.strides).set_data_type(dt);
  return b;
}
}  // namespace

RefCall::RefCall(OpKind kind) : node_(kind, "ref") {}

RefCall& RefCall::attr(const std::string& name, AttrValue v) {
  int i = node_.spec().attr_index(name);
  if (i < 0) std::abort();
  node_.attrs()[size_t(i)] = std::move(v);
  return *this;
}

Buf& RefCall::in(const std::string& port, std::vector<int64_t> dims, const std::vector<double>& values,
                 std::vector<int64_t> strides, DataType dt) {
  int i = node_.spec().input_index(port);
  if (i < 0) std::abort();
  Buf& b = ins_[port] = make_buf(std::move(dims), std::move(strides), dt);
  b.set_values(values);
  node_.inputs()[size_t(i)] = b.attr;
  return b;
}

void RefCall::scalar(const std::string& port, Scalar s) {
  int i = node_.spec().input_index(port);
  if (i < 0) std::abort();
  auto t = std::make_shared<TensorAttr>();
  t->set_dim({1, 1, 1, 1}).set_stride({1, 1, 1, 1}).set_value(s);
  node_.inputs()[size_t(i)] = t;
}

Buf& RefCall::out(const std::string& port, std::vector<int64_t> dims, std::vector<int64_t> strides, DataType dt) {
  int i = node_.spec().output_index(port);
  if (i < 0) std::abort();
  Buf& b = outs_[port] = make_buf(std::move(dims), std::move(strides), dt);
  node_.outputs()[size_t(i)] = b.attr;
  return b;
}

void RefCall::ragged(const std::string& port, bool output, const std::vector<double>& offsets) {
  Buf& owner = output ? outs_.at(port) : ins_.at(port);
  Buf r = make_buf({int64_t(offsets.size()), 1, 1, 1}, {}, DataType::INT64);
  r.set_values(offsets);
  owner.attr->set_ragged_offset(r.attr);
  ragged_.emplace_back(owner.attr, std::move(r));
}

Status RefCall::run() {
  const ref::Kernel* k = ref::kernel_for(node_.kind());
  if (!k) return {ErrorCode::GRAPH_NOT_SUPPORTED, "no kernel"};
  if (k->check) OPENDNN_RETURN_IF_ERROR(k->check(node_));
  ref::Args args;
  const auto& spec = *node_.spec().def;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    ref::View v;
    auto it = ins_.find(spec.inputs[i].name);
    if (it != ins_.end()) {
      Buf& b = it->second;
      v = {b.attr.get(), b.dtype, b.dims, b.strides, b.storage.data()};
    } else if (node_.inputs()[i]) {
      v.attr = node_.inputs()[i].get();
      v.dtype = v.attr->get_data_type();
    }
    args.in.push_back(v);
  }
  // Ragged offsets after the ports: inputs then outputs, in port order.
  auto push_ragged = [&](const std::vector<TensorPtr>& ts) {
    for (const auto& t : ts) {
      if (!t || !t->get_ragged_offset()) continue;
      for (auto& [owner, b] : ragged_)
        if (owner == t) args.in.push_back({b.attr.get(), b.dtype, b.dims, b.strides, b.storage.data()});
    }
  };
  push_ragged(node_.inputs());
  push_ragged(node_.outputs());
  for (size_t i = 0; i < spec.outputs.size(); ++i) {
    ref::View v;
    auto it = outs_.find(spec.outputs[i].name);
    if (it != outs_.end()) {
      Buf& b = it->second;
      v = {b.attr.get(), b.dtype, b.dims, b.strides, b.storage.data()};
    }
    args.out.push_back(v);
  }
  int64_t sb = k->scratch_bytes ? k->scratch_bytes(node_) : 0;
  scratch_.assign(size_t(sb) + 64, std::byte{0});
  auto p = reinterpret_cast<uintptr_t>(scratch_.data());
  args.scratch = reinterpret_cast<std::byte*>((p + 63) & ~uintptr_t(63));
  omp_set_num_threads(g_threads);
  return k->run(node_, args);
}

std::vector<double> rand_vec(size_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> r(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
  for (auto& x : r) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x = lo + (hi - lo) * double(s >> 11) * (1.0 / 9007199254740992.0);
  }
  return r;
}

std::vector<double> fd_grad(const std::vector<double>& x, const std::function<double(const std::vector<double>&)>& fn,
                            double h) {
  std::vector<double> g(x.size()), y = x;
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = x[i] + h;
    double fp = fn(y);
    y[i] = x[i] - h;
    double fm = fn(y);
    y[i] = x[i];
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double mb = 1.0, worst = 0.0;
  size_t wi = 0;
  for (double v : b) mb = std::max(mb, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) { worst = d; wi = i; }
  }
  EXPECT_LE(worst, tol * mb) << what << ": worst at " << wi << ": " << a[wi] << " vs " << b[wi];
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace opendnn::test2
