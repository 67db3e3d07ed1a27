// SPDX-License-Identifier: Apache-2.0
// A pass-by-value scalar of a graph as a plan reads it at execute time: its constant, or the host
// pointer its variant-pack slot holds.
#pragma once

#include <cstdint>

#include "common/dtype_convert.h"
#include "engines/cuda/cuda_engine.h"

namespace opendnn::cuda {

struct ScalarSource {
  double constant = 0.0;
  int64_t slot = -1;
  DataType type = DataType::FLOAT;
  static ScalarSource of(const Graph& g, const TensorPtr& t) {
    return {t->get_value().as_double(), slot_of(g, t), t->get_data_type()};
  }
  float read(void* const* slots) const {
    return slot < 0 ? float(constant) : float(load_element(type, slots[slot], 0));
  }
};

}  // namespace opendnn::cuda
