// SPDX-License-Identifier: Apache-2.0
// A small harness that runs one reference kernel directly on host buffers, without a graph:
// it builds the Node (attributes, port tensors), the Views and the scratch, and calls the kernel.
// Buffers hold values as double; a port's data type (default DOUBLE) decides the storage.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engines/reference/ref_kernel.h"
#include "opendnn/node.h"

namespace opendnn::test2 {

struct Buf {
  std::vector<int64_t> dims, strides;
  DataType dtype = DataType::DOUBLE;
  std::vector<uint64_t> storage;  // raw storage, 8 bytes per element (enough for every type)
  TensorPtr attr;

  int64_t elements() const;  // 1 + max offset
  int64_t offset(const std::vector<int64_t>& idx) const;
  double at(const std::vector<int64_t>& idx) const;
  void put(const std::vector<int64_t>& idx, double v);
  // Values in row-major logical order.
  std::vector<double> values() const;
  void set_values(const std::vector<double>& v);
};

class RefCall {
 public:
  explicit RefCall(OpKind kind);
  RefCall& attr(const std::string& name, AttrValue v);
  // Binds an input port. Empty strides = packed row-major. Values are in row-major logical order.
  Buf& in(const std::string& port, std::vector<int64_t> dims, const std::vector<double>& values,
          std::vector<int64_t> strides = {}, DataType dt = DataType::DOUBLE);
  // Binds a pass-by-value scalar on an input port (no buffer).
  void scalar(const std::string& port, Scalar s);
  Buf& out(const std::string& port, std::vector<int64_t> dims, std::vector<int64_t> strides = {},
           DataType dt = DataType::DOUBLE);
  // Attaches a ragged offset (values given) to the tensor on a port; call after in()/out().
  void ragged(const std::string& port, bool output, const std::vector<double>& offsets);
  Buf& input(const std::string& port) { return ins_.at(port); }
  Buf& output(const std::string& port) { return outs_.at(port); }
  Node& node() { return node_; }
  Status run();

 private:
  Node node_;
  std::map<std::string, Buf> ins_, outs_;
  std::vector<std::pair<TensorPtr, Buf>> ragged_;
  std::vector<std::byte> scratch_;
};

// OpenMP threads used by RefCall::run (default 1: the shared CI machines are oversubscribed and
// spinning threads cost more than they save at test sizes). Tests of thread-count independence
// raise it; above 1 it also sets the kernels' parallel threshold (ku::set_parallel_min_work) to 0
// so that even tiny problems run every parallel region threaded; 1 restores the default.
void set_threads(int n);

// Deterministic pseudo-random values in [lo, hi).
std::vector<double> rand_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);
int64_t volume(const std::vector<int64_t>& d);

// Central finite-difference gradient of fn at x (step h).
std::vector<double> fd_grad(const std::vector<double>& x, const std::function<double(const std::vector<double>&)>& fn,
                            double h = 1e-5);
// max|a-b| <= tol * max(1, max|b|), reported through GoogleTest with `what`.
void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const std::string& what);
double dot(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace opendnn::test2
