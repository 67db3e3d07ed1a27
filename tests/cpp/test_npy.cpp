// SPDX-License-Identifier: Apache-2.0
// The tool's .npy reader: header claims are checked against the file before anything is allocated,
// and every I/O failure names the file and the OS reason.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "npy.h"

using namespace opendnn;
using namespace opendnn::tools;

namespace {

std::string temp_path(const char* name) { return ::testing::TempDir() + "opendnn-npy-" + name; }

// A version 1.0 file: magic, header dict, then `data_bytes` bytes.
void write_raw(const std::string& path, const std::string& dict, size_t data_bytes) {
  std::string header = dict + "\n";
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  out += header + std::string(data_bytes, '\0');
  std::ofstream(path, std::ios::binary) << out;
}

TEST(Npy, RoundTrip) {
  std::string path = temp_path("roundtrip.npy");
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  std::string err;
  ASSERT_TRUE(write_npy(path, "<f4", {2, 3}, v.data(), v.size() * 4, err)) << err;
  NpyArray a;
  ASSERT_TRUE(read_npy(path, a, err)) << err;
  EXPECT_EQ(a.dtype, DataType::FLOAT);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 24u);
  EXPECT_EQ(std::memcmp(a.data.data(), v.data(), 24), 0);
  std::remove(path.c_str());
}

TEST(Npy, HugeHeaderClaimInASmallFileFailsBeforeAllocating) {
  // 2^31 float32 elements = 8 GiB claimed, 16 bytes present. The claim is refused from the file's
  // size; nothing near 8 GiB is allocated (ASan's allocator would report it).
  std::string path = temp_path("huge.npy");
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 32768), }", 16);
  NpyArray a;
  std::string err;
  EXPECT_FALSE(read_npy(path, a, err));
  EXPECT_NE(err.find("the header claims 8589934592 bytes of data, but the file holds 16 (truncated)"), std::string::npos)
      << err;
  // Trailing bytes are an error too: the header does not describe the file.
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12);
  EXPECT_FALSE(read_npy(path, a, err));
  EXPECT_NE(err.find("trailing bytes"), std::string::npos) << err;
  // A header length beyond the file.
  std::ofstream(path, std::ios::binary) << std::string("\x93NUMPY\x01\x00\xff\x7f{", 11);
  EXPECT_FALSE(read_npy(path, a, err));
  EXPECT_NE(err.find("truncated header"), std::string::npos) << err;
  std::remove(path.c_str());
}

TEST(Npy, IoFailuresNameTheOsReason) {
  NpyArray a;
  std::string err;
  EXPECT_FALSE(read_npy("/tmp", a, err));
  EXPECT_NE(err.find("cannot read /tmp: Is a directory"), std::string::npos) << err;
  EXPECT_FALSE(read_npy("/no/such/x.npy", a, err));
  EXPECT_NE(err.find("cannot read /no/such/x.npy: No such file or directory"), std::string::npos) << err;
  float v = 1;
  EXPECT_FALSE(write_npy("/no/such/dir/y.npy", "<f4", {1}, &v, 4, err));
  EXPECT_NE(err.find("cannot write /no/such/dir/y.npy: No such file or directory"), std::string::npos) << err;
  if (std::FILE* full = std::fopen("/dev/full", "wb")) {
    std::fclose(full);
    std::vector<float> big(1 << 16, 1.0f);
    EXPECT_FALSE(write_npy("/dev/full", "<f4", {int64_t(big.size())}, big.data(), big.size() * 4, err));
    EXPECT_NE(err.find("cannot write /dev/full: No space left on device"), std::string::npos) << err;
  }
}

TEST(Npy, MalformedHeadersAreRejected) {
  std::string path = temp_path("bad.npy");
  NpyArray a;
  std::string err;
  write_raw(path, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8);
  EXPECT_FALSE(read_npy(path, a, err));
  EXPECT_NE(err.find("fortran_order"), std::string::npos) << err;
  write_raw(path, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8);
  EXPECT_FALSE(read_npy(path, a, err));
  EXPECT_NE(err.find("unsupported dtype >f4"), std::string::npos) << err;
  write_raw(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8);
  EXPECT_FALSE(read_npy(path, a, err));
  EXPECT_NE(err.find("malformed shape"), std::string::npos) << err;
  std::remove(path.c_str());
}

}  // namespace
