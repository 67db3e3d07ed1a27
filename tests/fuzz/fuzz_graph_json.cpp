// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for Graph JSON v2: any input must be rejected cleanly or read into a graph that
// writes back, reads again and writes identically; validate() must not crash on what was read.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "opendnn/graph.h"

namespace {
[[noreturn]] void die(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_graph_json: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// serialize -> deserialize -> serialize is the identity on a graph that was read successfully.
void check_round_trip(const opendnn::Graph& g, const char* when) {
  std::string s1;
  opendnn::Status st = g.serialize(s1);
  if (st.is_bad()) die(when, "serialize failed: " + st.to_string());
  opendnn::Graph g2;
  st = g2.deserialize(s1);
  if (st.is_bad()) die(when, "reading our own output failed: " + st.to_string() + "\n" + s1);
  std::string s2;
  st = g2.serialize(s2);
  if (st.is_bad() || s1 != s2) die(when, "round trip differs:\n" + s1 + "\n----\n" + s2);
  if (g.key() != g2.key()) die(when, "key changed over a round trip");
  std::string st1, st2;
  if (g.serialize(st1, true).is_bad() || g2.serialize(st2, true).is_bad() || st1 != st2)
    die(when, "structure documents differ");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  {
    opendnn::Graph p;  // a serialized plan (graph + plan record): rejected cleanly or restored
    (void)p.deserialize_plan(text);
  }
  opendnn::Graph g;
  if (g.deserialize(text).is_bad()) return 0;
  check_round_trip(g, "after deserialize");
  if (g.validate().is_good()) check_round_trip(g, "after validate");
  return 0;
}
