// SPDX-License-Identifier: Apache-2.0
#include "npy.h"

#include <cstdio>
#include <cstring>

namespace opendnn::tools {

namespace {

struct DescrType {
  const char* descr;
  DataType type;
};
constexpr DescrType kTypes[] = {
    {"<f4", DataType::FLOAT}, {"<f8", DataType::DOUBLE}, {"<f2", DataType::HALF},   {"|i1", DataType::INT8},
    {"<i1", DataType::INT8},  {"|u1", DataType::UINT8},  {"<u1", DataType::UINT8},  {"<i4", DataType::INT32},
    {"<i8", DataType::INT64}, {"|b1", DataType::BOOLEAN}, {"<b1", DataType::BOOLEAN},
};

// The value of 'key' in the header dict, as raw text up to the next top-level comma or brace.
bool dict_value(const std::string& h, const std::string& key, std::string& out) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return false;
  size_t c = h.find(':', k);
  if (c == std::string::npos) return false;
  size_t i = c + 1;
  while (i < h.size() && h[i] == ' ') ++i;
  int depth = 0;
  size_t j = i;
  for (; j < h.size(); ++j) {
    char ch = h[j];
    if (ch == '(' || ch == '[') ++depth;
    if (ch == ')' || ch == ']') --depth;
    if (depth == 0 && (ch == ',' || ch == '}')) break;
    if (depth < 0) return false;
  }
  out = h.substr(i, j - i);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return true;
}

}  // namespace

std::optional<DataType> npy_dtype(std::string_view descr) {
  for (const auto& t : kTypes)
    if (descr == t.descr) return t.type;
  return std::nullopt;
}

std::string npy_descr(DataType t) {
  for (const auto& d : kTypes)
    if (d.type == t) return d.descr;
  return {};
}

bool read_npy(const std::string& path, NpyArray& out, std::string& error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    error = "cannot open " + path;
    return false;
  }
  auto fail = [&](const std::string& why) {
    std::fclose(f);
    error = path + ": " + why;
    return false;
  };
  unsigned char magic[8];
  if (std::fread(magic, 1, 8, f) != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0) return fail("not a .npy file");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    if (std::fread(b, 1, 2, f) != 2) return fail("truncated header");
    hlen = uint32_t(b[0]) | uint32_t(b[1]) << 8;
  } else if (magic[6] == 2 || magic[6] == 3) {
    unsigned char b[4];
    if (std::fread(b, 1, 4, f) != 4) return fail("truncated header");
    hlen = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  } else {
    return fail("unsupported .npy version " + std::to_string(magic[6]));
  }
  if (hlen > (1u << 20)) return fail("header too large");
  std::string h(hlen, '\0');
  if (std::fread(h.data(), 1, hlen, f) != hlen) return fail("truncated header");

  std::string descr, fortran, shape;
  if (!dict_value(h, "descr", descr) || !dict_value(h, "fortran_order", fortran) || !dict_value(h, "shape", shape))
    return fail("malformed header: " + h);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"')) return fail("unsupported descr " + descr);
  descr = descr.substr(1, descr.size() - 2);
  NpyArray a;
  a.descr = descr;
  a.fortran_order = fortran == "True";
  if (auto t = npy_dtype(descr)) {
    a.dtype = *t;
    a.item_bytes = bits_of(*t) / 8;
  } else if (descr == "<V2" || descr == "|V2" || descr == "|V1" || descr == "<V1") {
    a.item_bytes = descr.back() - '0';  // raw bits (ml_dtypes bfloat16 / float8 arrays)
  } else {
    return fail("unsupported dtype " + descr);
  }
  // shape: "(2, 3)" or "(4,)" or "()"
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return fail("malformed shape " + shape);
  int64_t count = 1;
  std::string num;
  for (size_t i = 1; i < shape.size(); ++i) {
    char ch = shape[i];
    if (ch >= '0' && ch <= '9') {
      num += ch;
    } else if (ch == ',' || ch == ')') {
      if (!num.empty()) {
        int64_t d = std::strtoll(num.c_str(), nullptr, 10);
        if (d < 0 || num.size() > 15) return fail("bad dimension " + num);
        a.shape.push_back(d);
        if (__builtin_mul_overflow(count, d, &count)) return fail("shape overflows");
        num.clear();
      }
    } else if (ch != ' ' && ch != 'L') {
      return fail("malformed shape " + shape);
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, int64_t(a.item_bytes), &bytes) || bytes > (int64_t(1) << 40))
    return fail("array too large");
  a.data.resize(size_t(bytes));
  if (bytes > 0 && std::fread(a.data.data(), 1, size_t(bytes), f) != size_t(bytes))
    return fail("truncated data: expected " + std::to_string(bytes) + " bytes");
  std::fclose(f);
  out = std::move(a);
  return true;
}

bool write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
               const void* data, size_t bytes, std::string& error) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) dict += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  dict += "), }";
  // Pad so that magic(6) + version(2) + len(2) + header is a multiple of 64, ending in '\n'.
  size_t total = 10 + dict.size() + 1;
  size_t pad = (64 - total % 64) % 64;
  dict += std::string(pad, ' ') + "\n";
  if (dict.size() > 65535) {
    error = "header too large";
    return false;
  }
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    error = "cannot write " + path;
    return false;
  }
  unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(dict.size() & 0xff), uint8_t(dict.size() >> 8)};
  bool ok = std::fwrite(head, 1, 10, f) == 10 && std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes);
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) error = "cannot write " + path;
  return ok;
}

}  // namespace opendnn::tools
