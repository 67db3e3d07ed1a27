// SPDX-License-Identifier: Apache-2.0
// The on-disk plan cache: autotune's plan order per (graph, device, opendnn version).
//
// One small text file per key under $OPENDNN_CACHE_DIR (else ~/.cache/opendnn):
//
//   opendnn-plan-cache 1
//   key 00c0ffee00c0ffee
//   device cpu
//   version 0.1.0
//   plans 2
//   10100 3 12.500
//   10000 0 840.000
//   end
//
// Each plan line is engine_id, local_index, measured µs, fastest first. Writes go to a unique
// temporary file that is renamed over the target, so concurrent writers never tear a file. A file
// that does not parse, or was written for another key, device or version, is ignored with a
// warning on stderr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opendnn/engine.h"
#include "opendnn/graph.h"

namespace opendnn::plan_cache {

struct Entry {
  int64_t engine_id = 0;
  int64_t local_index = 0;
  double measured_us = 0.0;
};

// "cpu", or "cuda:sm90:132sm:dev0".
std::string device_string(const Target& target);
// Graph::key() mixed with a structural hash of the graph (ops, attributes, tensor shapes and types,
// wiring), so distinct graphs never share an entry even while key() is still a stub.
uint64_t graph_fingerprint(const Graph& graph);
// $OPENDNN_CACHE_DIR, else $HOME/.cache/opendnn, else "" (no cache).
std::string cache_dir();
// The file for this graph on this target ("" when there is no cache directory).
std::string cache_path(const Graph& graph, const Target& target);

// The recorded order, or false when there is none (a bad file also warns on stderr).
bool read(const std::string& path, uint64_t fingerprint, const std::string& device, std::vector<Entry>& out);
Status write(const std::string& path, uint64_t fingerprint, const std::string& device,
             const std::vector<Entry>& entries);

}  // namespace opendnn::plan_cache
