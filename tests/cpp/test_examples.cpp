// SPDX-License-Identifier: Apache-2.0
// Every examples/graphs/*.json validates and round-trips; every examples/graphs/invalid/NAME.CODE.json
// fails with CODE (from deserialize() or validate()).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "opendnn/graph.h"

using namespace opendnn;
namespace fs = std::filesystem;

namespace {

fs::path examples_dir() {
  fs::path here = fs::path(__FILE__).parent_path();  // tests/cpp
  fs::path dir = here.parent_path().parent_path() / "examples" / "graphs";
  if (fs::exists(dir)) return dir;
  return fs::path("examples") / "graphs";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The error code in "name.CODE.json".
std::string expected_code(const fs::path& p) {
  std::string stem = p.stem().string();
  auto dot = stem.rfind('.');
  return dot == std::string::npos ? std::string() : stem.substr(dot + 1);
}

Status load_and_validate(const std::string& text, Graph& g) {
  OPENDNN_RETURN_IF_ERROR(g.deserialize(text));
  return g.validate();
}

}  // namespace

TEST(Examples, ValidGraphsValidateAndRoundTrip) {
  auto files = json_files(examples_dir());
  ASSERT_GE(files.size(), 4u) << "no examples found in " << examples_dir();
  std::set<std::string> names;
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    names.insert(f.filename().string());
    std::string text = read_file(f);
    Graph g;
    Status s = g.deserialize(text);
    ASSERT_TRUE(s.is_good()) << s.to_string();
    // The document as read round-trips exactly.
    std::string s1 = g.serialize();
    ASSERT_FALSE(s1.empty());
    Graph g2;
    ASSERT_TRUE(g2.deserialize(s1).is_good());
    EXPECT_EQ(s1, g2.serialize());
    EXPECT_EQ(g.key(), g2.key());

    s = g.validate();
    EXPECT_TRUE(s.is_good()) << s.to_string();
    if (s.is_bad()) continue;
    // So does the validated graph (inferred dims and types included), and it validates again.
    std::string v1 = g.serialize();
    Graph g3;
    ASSERT_TRUE(g3.deserialize(v1).is_good());
    EXPECT_TRUE(g3.validate().is_good());
    EXPECT_EQ(v1, g3.serialize());
    EXPECT_EQ(g.key(), g3.key());
  }
  for (const char* want : {"mlp_block.json", "transformer_attention.json", "conv_bias_relu.json", "gdn_layer.json"})
    EXPECT_TRUE(names.count(want)) << want;
}

TEST(Examples, InvalidGraphsFailWithTheirCode) {
  auto files = json_files(examples_dir() / "invalid");
  std::set<std::string> categories;
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::string want = expected_code(f);
    ASSERT_FALSE(want.empty()) << "name the expected code: NAME.CODE.json";
    Graph g;
    Status s = load_and_validate(read_file(f), g);
    ASSERT_TRUE(s.is_bad()) << "expected " << want;
    EXPECT_EQ(std::string(to_string(s.code())), want) << s.to_string();
    EXPECT_FALSE(s.message().empty());
    std::string stem = f.stem().string();
    categories.insert(stem.substr(0, stem.find('.')));
  }
  for (const char* c : {"malformed_json", "bad_version", "duplicate_uid", "dangling_reference", "wrong_attribute_type",
                        "unknown_tag", "shape_deduction_failure", "missing_attribute", "unsupported_sdpa_head_dim",
                        "unsupported_sdpa_float_io", "bad_enum_member", "unknown_attribute"})
    EXPECT_TRUE(categories.count(c)) << "no invalid example for " << c;
}
