// SPDX-License-Identifier: Apache-2.0
// The cuda engine's fused-pointwise source generator and kernel disk cache, on the CPU: no GPU and
// no CUDA toolkit needed (the generator is plain C++, compiled into this test directly because CI
// builds the library without the cuda engine). When an NVRTC happens to be installed, the generated
// source is also compiled for sm_90a, which catches generator bugs that only a compiler sees.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engines/cuda/pointwise/pw_codegen.cpp"
#include "engines/cuda/pointwise/pw_nvrtc.cpp"
#include "opendnn/opendnn.h"

using namespace opendnn;
namespace pw = opendnn::cuda::pw;

namespace {

TensorPtr input(Graph& g, const char* name, std::vector<int64_t> dims, DataType dt, std::vector<int64_t> strides = {}) {
  if (strides.empty()) strides = row_major_strides(dims);
  return g.tensor(TensorAttr().set_name(name).set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(dt));
}

// y = gelu(x * scale + bias) * gate -> bf16, plus the pre-activation as a second (fp32) output.
void build_chain(Graph& g) {
  g.set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = input(g, "x", {64, 128}, DataType::BFLOAT16);
  auto bias = input(g, "bias", {1, 128}, DataType::BFLOAT16);
  auto gate = input(g, "gate", {64, 1}, DataType::FLOAT);
  auto scale = g.tensor(Scalar::of_float(0.5f));
  scale->set_dim({1, 1}).set_stride({1, 1});
  auto h = g.add(g.mul(x, scale), bias);
  h->set_output(true).set_data_type(DataType::FLOAT).set_name("h");
  auto y = g.mul(g.gelu(h), gate);
  y->set_output(true).set_data_type(DataType::BFLOAT16).set_name("y");
  Status st = g.validate();
  ASSERT_TRUE(st.is_good()) << st.to_string();
}

std::string fresh_dir(const char* tag) {
  auto d = std::filesystem::temp_directory_path() / ("opendnn_pw_test_" + std::string(tag) + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

}  // namespace

TEST(CudaPointwiseCodegen, ChainSourceHasTheExpectedExpressions) {
  Graph g;
  build_chain(g);
  pw::Chain c;
  ASSERT_EQ(pw::generate(g, c), "");
  const std::string& s = c.source;
  EXPECT_NE(s.find("typedef float C;"), std::string::npos);
  EXPECT_NE(s.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(s.find(pw::kKernelName), std::string::npos);
  EXPECT_NE(s.find("pw_gelu("), std::string::npos);
  EXPECT_NE(s.find("const C s0 = (C)a.s[0];"), std::string::npos);  // the scale is an argument, not baked
  EXPECT_NE(s.find("ld_bf16("), std::string::npos);
  EXPECT_NE(s.find("st_bf16("), std::string::npos);
  EXPECT_NE(s.find("st_f32("), std::string::npos);                   // h is an fp32 output
  EXPECT_NE(s.find("r % 128"), std::string::npos);                    // bias/gate broadcast: 2-D index math
  ASSERT_EQ(c.scalars.size(), 1u);
  EXPECT_DOUBLE_EQ(c.scalars[0].constant, 0.5);
  EXPECT_EQ(c.in_slots.size(), 3u);   // x, bias, gate
  EXPECT_EQ(c.out_slots.size(), 2u);  // h, y
  EXPECT_EQ(c.elements, 64 * 128);
  EXPECT_EQ(c.vec, 8);  // 16 bytes of the narrowest packed operand (bf16)
}

TEST(CudaPointwiseCodegen, SameShapePackedChainCollapsesToOneDim) {
  Graph g;
  auto a = input(g, "a", {4, 8, 16}, DataType::HALF);
  auto b = input(g, "b", {4, 8, 16}, DataType::HALF);
  auto y = g.max(a, b);
  y->set_output(true).set_data_type(DataType::HALF);
  ASSERT_TRUE(g.validate().is_good());
  pw::Chain c;
  ASSERT_EQ(pw::generate(g, c), "");
  EXPECT_EQ(c.dims, (std::vector<int64_t>{512}));
  EXPECT_EQ(c.vec, 8);
  EXPECT_NE(c.source.find("pw_max("), std::string::npos);
  EXPECT_EQ(c.source.find("r % "), std::string::npos);  // no divisions at all
}

TEST(CudaPointwiseCodegen, DeclinesWithAReason) {
  Graph g;
  auto a = input(g, "a", {4, 4}, DataType::FP8_E4M3);
  auto y = g.relu(a);
  y->set_output(true).set_data_type(DataType::FLOAT);
  ASSERT_TRUE(g.validate().is_good());
  pw::Chain c;
  std::string why = pw::generate(g, c);
  EXPECT_NE(why.find("'a'"), std::string::npos) << why;
  EXPECT_NE(why.find("FP8_E4M3"), std::string::npos) << why;

  Graph mm;  // a non-pointwise node anywhere: not a chain
  auto x = input(mm, "x", {1, 8, 8}, DataType::FLOAT);
  auto z = mm.relu(mm.matmul(x, x));
  z->set_output(true).set_data_type(DataType::FLOAT);
  ASSERT_TRUE(mm.validate().is_good());
  EXPECT_NE(pw::generate(mm, c).find("is not POINTWISE"), std::string::npos);
}

TEST(CudaPointwiseCodegen, CacheKeyDependsOnSourceArchAndCompiler) {
  const std::string k = pw::cache_key("src", "sm_90a", 13000);
  EXPECT_EQ(k.size(), 32u);
  EXPECT_EQ(k, pw::cache_key("src", "sm_90a", 13000));
  EXPECT_NE(k, pw::cache_key("src2", "sm_90a", 13000));
  EXPECT_NE(k, pw::cache_key("src", "sm_100a", 13000));
  EXPECT_NE(k, pw::cache_key("src", "sm_90a", 12080));
}

TEST(CudaPointwiseCodegen, DiskCacheRoundTripAndCorruption) {
  const std::string dir = fresh_dir("cache");
  const std::string key = pw::cache_key("x", "sm_90a", 13000);
  std::string got;
  EXPECT_FALSE(pw::cache_read(dir, key, got));  // missing dir: a miss, not an error
  std::string blob(1000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = char(i * 7);
  ASSERT_TRUE(pw::cache_write(dir, key, blob));
  ASSERT_TRUE(pw::cache_read(dir, key, got));
  EXPECT_EQ(got, blob);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().extension(), ".cubin");  // no temporary left behind
  }
  EXPECT_EQ(files, 1u);
  const std::string path = dir + "/" + key + ".cubin";
  {  // flip a payload byte: the checksum rejects it
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x55');
  }
  EXPECT_FALSE(pw::cache_read(dir, key, got));
  std::filesystem::resize_file(path, 50);  // truncated
  EXPECT_FALSE(pw::cache_read(dir, key, got));
  ASSERT_TRUE(pw::cache_write(dir, key, blob));  // rewriting repairs it
  EXPECT_TRUE(pw::cache_read(dir, key, got));
  std::filesystem::remove_all(dir);
}

TEST(CudaPointwiseCodegen, GeneratedSourceCompilesWithNvrtcWhenPresent) {
  if (!pw::nvrtc().ok) GTEST_SKIP() << pw::nvrtc().decline_reason();
  Graph g;
  build_chain(g);
  pw::Chain c;
  ASSERT_EQ(pw::generate(g, c), "");
  std::string cubin;
  const int64_t before = pw::nvrtc_compile_count();
  std::string err = pw::nvrtc_compile(c.source, "sm_90a", cubin);
  EXPECT_EQ(err, "") << c.source;
  EXPECT_GT(cubin.size(), 100u);
  EXPECT_EQ(pw::nvrtc_compile_count(), before + 1);
}

// Every mode of pointwise_modes.def generates source that NVRTC accepts (float compute; GEN_INDEX's
// INT32 output takes the double path; BINARY_SELECT reads a bool mask).
TEST(CudaPointwiseCodegen, EveryModeCompilesWithNvrtcWhenPresent) {
  if (!pw::nvrtc().ok) GTEST_SKIP() << pw::nvrtc().decline_reason();
  for (int m = 0; m <= int(PointwiseMode::BINARY_SELECT); ++m) {
    const auto mode = PointwiseMode(m);
    const std::string name(to_string(mode));
    const int arity = pointwise_arity(mode);
    SCOPED_TRACE(name);
    Graph g;
    g.set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
    auto a = input(g, "a", {6, 16}, DataType::HALF);
    NodeAttrs attrs;
    attrs.set("mode", name);
    if (arity >= 2) attrs.input("IN_1", input(g, "b", {1, 16}, DataType::FLOAT));
    if (arity >= 3) attrs.input("IN_2", input(g, "mask", {6, 1}, DataType::BOOLEAN));
    if (mode == PointwiseMode::GEN_INDEX) attrs.set("axis", int64_t(0));
    auto y = g.pointwise(a, attrs);
    y->set_output(true).set_data_type(mode == PointwiseMode::GEN_INDEX ? DataType::INT32 : DataType::BFLOAT16);
    Status st = g.validate();
    ASSERT_TRUE(st.is_good()) << st.to_string();
    pw::Chain c;
    ASSERT_EQ(pw::generate(g, c), "");
    std::string cubin;
    EXPECT_EQ(pw::nvrtc_compile(c.source, "sm_90a", cubin), "") << c.source;
  }
}

// The graph of bench/pointwise.py (two pass-by-value FLOAT scalars, a row bias, an identity at the end,
// 8192x8192): the Python benchmark process crashed while planning it on the H200.
TEST(CudaPointwiseCodegen, BenchmarkChainGeneratesAndCompiles) {
  Graph g;
  g.set_io_data_type(DataType::BFLOAT16).set_intermediate_data_type(DataType::FLOAT).set_compute_data_type(DataType::FLOAT);
  auto x = input(g, "x", {8192, 8192}, DataType::BFLOAT16);
  auto bias = input(g, "bias", {1, 8192}, DataType::BFLOAT16);
  auto gate = input(g, "gate", {8192, 8192}, DataType::BFLOAT16);
  auto s = g.tensor(Scalar::of_float(0.125f));
  s->set_dim({1, 1}).set_stride({1, 1});
  auto o = g.tensor(Scalar::of_float(1.5f));
  o->set_dim({1, 1}).set_stride({1, 1});
  auto y = g.identity(g.mul(g.mul(g.gelu(g.add(g.mul(x, s), bias)), gate), o));
  y->set_output(true).set_data_type(DataType::BFLOAT16);
  ASSERT_TRUE(g.validate().is_good()) << g.validate().to_string();
  pw::Chain c;
  ASSERT_EQ(pw::generate(g, c), "");
  if (!pw::nvrtc().ok) GTEST_SKIP() << pw::nvrtc().decline_reason();
  std::string cubin;
  EXPECT_EQ(pw::nvrtc_compile(c.source, "sm_90a", cubin), "") << c.source;
}
