// SPDX-License-Identifier: Apache-2.0
// The `cudnn` engine: lowers opendnn graphs to cuDNN's backend API (libcudnn 9.x, loaded at run time).
//
// Plans. Each engine config that cuDNN's heuristics (modes A, B and FALLBACK) return, and that
// finalizes into an execution plan, becomes one PlanCandidate:
//   name         "eng<global engine id>_<knob>=<value>_..." (prefixed "unified_" for the SDPA_FWD/BWD op)
//   local_index  global engine id * 1000 + (FNV-1a of the knob choices mod 1000), + 1,000,000 for
//                unified SDPA; stable across runs and machines for the same cuDNN engine config
//   knobs        ("engine", id), ("unified", 0|1), then ("knob<type>", value) for each knob choice
//   workspace    the execution plan's workspace + the engine's own workspace tensors (256-aligned)
//   estimate     plain SDPA (fwd/bwd, d 64/128/256) on sm_90: the tile model of plan/attention_cost.h
//                fitted to cuDNN's kernels on the H200; else a roofline guess: FLOPs at 700 TFLOP/s
//                (16-bit) or 50 (fp32) + bytes at 3.5 TB/s; 2% more per heuristic rank
// Heuristic modes: A, B and FALLBACK all admit the engine (it is the backstop on CUDA targets).
// Engine/knob API, notes, serialized plans and CUDA graphs: docs/engines_and_knobs.md.
// Knob search (opt-in, src/engines/cudnn/knob_search.h): with OPENDNN_CUDNN_KNOB_SEARCH=1, up to
// OPENDNN_CUDNN_KNOB_SEARCH_MAX (64) more candidates per graph, each a heuristic config with one
// performance knob moved within the range the engine reports, that finalizes. Same naming and indices
// (offered after the heuristic configs, so these keep theirs), knob ("searched", 1), ranked behind the
// heuristic configs: the default choice is unchanged and autotune() finds the fastest.
// The router finds the engine with the weak-symbol pattern of the reference kernel table:
//   std::shared_ptr<Engine> make_cudnn_engine() __attribute__((weak));  if (make_cudnn_engine) ...
// (the symbol is absent when opendnn is built without the cuDNN headers).
#pragma once

#include <memory>

#include "opendnn/engine.h"

namespace opendnn {

inline constexpr int64_t kCudnnEngineId = kBackendEngineIdBase;  // 0

// The process-wide cudnn engine (one instance; cheap to call).
std::shared_ptr<Engine> make_cudnn_engine();

namespace cudnn {
// What the loader found, for collect_env and error messages: "cuDNN 9.19.0 from <path>; cudart <soname>"
// or the decline reason with every path tried.
std::string describe_loaded();
// How execute() refreshes the variant pack: "set" (pointers re-set on the finalized descriptor) or
// "fresh" (a new descriptor per call). Known after the first plan is built; "" before.
const char* variant_pack_mode();
}  // namespace cudnn

}  // namespace opendnn
