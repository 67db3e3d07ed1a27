// SPDX-License-Identifier: Apache-2.0
#include "npy.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "serialize/file_read.h"

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

namespace {

// The header dict of an open .npy file (after the magic and the length field).
Status read_header(serialize::InputFile& f, std::string& header, size_t& data_offset) {
  unsigned char magic[8];
  OPENDNN_RETURN_IF_ERROR(f.read_exact(magic, 8, "header"));
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) return {ErrorCode::INVALID_VALUE, f.name() + ": not a .npy file"};
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    OPENDNN_RETURN_IF_ERROR(f.read_exact(b, 2, "header"));
    hlen = uint32_t(b[0]) | uint32_t(b[1]) << 8;
    data_offset = 10 + hlen;
  } else if (magic[6] == 2 || magic[6] == 3) {
    unsigned char b[4];
    OPENDNN_RETURN_IF_ERROR(f.read_exact(b, 4, "header"));
    hlen = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
    data_offset = 12 + size_t(hlen);
  } else {
    return {ErrorCode::INVALID_VALUE, f.name() + ": unsupported .npy version " + std::to_string(magic[6])};
  }
  if (hlen > (1u << 20)) return {ErrorCode::INVALID_VALUE, f.name() + ": header too large"};
  if (f.regular() && data_offset > f.size())
    return {ErrorCode::INVALID_VALUE, f.name() + ": truncated header: " + std::to_string(hlen) + " bytes claimed, the file holds " +
                                          std::to_string(f.size())};
  header.assign(hlen, '\0');
  return f.read_exact(header.data(), hlen, "header");
}

// Shape text "(2, 3)", "(4,)" or "()" into dims and their product.
bool parse_shape(const std::string& shape, std::vector<int64_t>& dims, int64_t& count) {
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return false;
  count = 1;
  std::string num;
  for (size_t i = 1; i < shape.size(); ++i) {
    char ch = shape[i];
    if (ch >= '0' && ch <= '9') {
      num += ch;
    } else if (ch == ',' || ch == ')') {
      if (!num.empty()) {
        if (num.size() > 15) return false;
        int64_t d = std::strtoll(num.c_str(), nullptr, 10);
        dims.push_back(d);
        if (__builtin_mul_overflow(count, d, &count)) return false;
        num.clear();
      }
    } else if (ch != ' ' && ch != 'L') {
      return false;
    }
  }
  return true;
}

// The element data: the header's claim is checked against the file's size before anything is
// allocated; from a stream, the buffer grows only as data arrives.
Status read_data(serialize::InputFile& f, size_t data_offset, int64_t bytes, std::vector<std::byte>& out) {
  const std::string claim = "the header claims " + std::to_string(bytes) + " bytes of data";
  if (f.regular()) {
    size_t have = f.size() - data_offset;
    if (uint64_t(bytes) != have)
      return {ErrorCode::INVALID_VALUE, f.name() + ": " + claim + ", but the file holds " + std::to_string(have) +
                                            (uint64_t(bytes) > have ? " (truncated)" : " (trailing bytes)")};
    out.resize(size_t(bytes));
    return f.read_exact(out.data(), size_t(bytes), "data");
  }
  std::string text;
  OPENDNN_RETURN_IF_ERROR(f.read_all(size_t(bytes), "the data is", text));
  if (text.size() != size_t(bytes))
    return {ErrorCode::INVALID_VALUE, f.name() + ": " + claim + ", but the stream ended after " + std::to_string(text.size())};
  out.resize(text.size());
  std::memcpy(out.data(), text.data(), text.size());
  return {};
}

}  // namespace

bool read_npy(const std::string& path, NpyArray& out, std::string& error) {
  serialize::InputFile f;
  auto fail = [&](const std::string& why) {
    error = path + ": " + why;
    return false;
  };
  auto failed = [&](const Status& s) {
    error = s.message();
    return false;
  };
  if (Status s = f.open(path, /*regular_only=*/false); s.is_bad()) return failed(s);
  std::string h;
  size_t data_offset = 0;
  if (Status s = read_header(f, h, data_offset); s.is_bad()) return failed(s);

  std::string descr, fortran, shape;
  if (!dict_value(h, "descr", descr) || !dict_value(h, "fortran_order", fortran) || !dict_value(h, "shape", shape))
    return fail("malformed header: " + h);
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"')) return fail("unsupported descr " + descr);
  descr = descr.substr(1, descr.size() - 2);
  if (fortran != "True" && fortran != "False") return fail("malformed fortran_order " + fortran);
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
  int64_t count = 1;
  if (!parse_shape(shape, a.shape, count)) return fail("malformed shape " + shape);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(count, int64_t(a.item_bytes), &bytes) || bytes > (int64_t(1) << 40))
    return fail("array too large");
  if (Status s = read_data(f, data_offset, bytes, a.data); s.is_bad()) return failed(s);
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
    error = serialize::os_error("write", path, errno);
    return false;
  }
  unsigned char head[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, uint8_t(dict.size() & 0xff), uint8_t(dict.size() >> 8)};
  bool ok = std::fwrite(head, 1, 10, f) == 10 && std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            (bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes) && std::fflush(f) == 0;
  int err = ok ? 0 : errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) error = serialize::os_error("write", path, err);
  return ok;
}

}  // namespace opendnn::tools
