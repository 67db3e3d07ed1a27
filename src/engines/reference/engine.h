// SPDX-License-Identifier: Apache-2.0
// The reference engine: plain C++ kernels for every op, on the CPU. The numeric oracle.
#pragma once

#include <memory>

#include "opendnn/engine.h"

namespace opendnn::ref {

// A fresh reference engine (the registry creates one on first use).
std::shared_ptr<Engine> make_reference_engine();

// Rough cost of running `graph` on the reference engine, in microseconds.
double estimate_us(const Graph& graph);

}  // namespace opendnn::ref
