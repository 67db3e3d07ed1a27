// SPDX-License-Identifier: Apache-2.0
#include "plan/plan_cache.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <unordered_map>

#include "opendnn/opendnn.h"
#include "serialize/file_read.h"

namespace opendnn::plan_cache {

namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  }
  void u64(uint64_t v) { bytes(&v, sizeof v); }
  void i64(int64_t v) { bytes(&v, sizeof v); }
  void f64(double v) { bytes(&v, sizeof v); }
  void str(std::string_view s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void ints(const std::vector<int64_t>& v) {
    u64(v.size());
    for (int64_t x : v) i64(x);
  }
};

void hash_attr(Fnv& f, const AttrValue& v) {
  f.u64(v.index());
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
        } else if constexpr (std::is_same_v<T, bool>) {
          f.u64(x ? 1 : 0);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          f.i64(x);
        } else if constexpr (std::is_same_v<T, double>) {
          f.f64(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          f.str(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          f.ints(x);
        } else {
          f.u64(x.size());
          for (double d : x) f.f64(d);
        }
      },
      static_cast<const AttrVariant&>(v));
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::string sanitize(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') ? c : '_';
  return o;
}

constexpr size_t kMaxFileBytes = size_t(1) << 20;

bool known_engine(int64_t id) {
  for (const auto& e : registered_engines())
    if (e->engine_id() == id) return true;
  return false;
}

void warn(const std::string& path, const std::string& why) {
  std::fprintf(stderr, "opendnn: warning: ignoring plan cache file %s: %s\n", path.c_str(), why.c_str());
}

}  // namespace

std::string device_string(const Target& t) {
  if (t.kind == DeviceKind::CPU) return "cpu";
  return "cuda:sm" + std::to_string(t.sm_version) + ":" + std::to_string(t.sm_count) + "sm:dev" +
         std::to_string(t.device);
}

uint64_t graph_fingerprint(const Graph& g) {
  Fnv f;
  f.u64(g.key());
  const GraphContext& c = g.context();
  f.u64(uint64_t(c.io_data_type));
  f.u64(uint64_t(c.intermediate_data_type));
  f.u64(uint64_t(c.compute_data_type));
  std::unordered_map<const TensorAttr*, int64_t> ids;
  auto tensor = [&](const TensorPtr& t) {
    if (!t) {
      f.i64(-1);
      return;
    }
    auto [it, fresh] = ids.emplace(t.get(), int64_t(ids.size()));
    f.i64(it->second);
    if (!fresh) return;
    f.ints(t->get_dim());
    f.ints(t->get_stride());
    f.u64(uint64_t(t->get_data_type()));
    f.u64(t->get_is_virtual() ? 1 : 0);
    f.u64(t->get_is_pass_by_value() ? 1 : 0);
    if (t->get_value().is_set()) {
      f.f64(t->get_value().f);
      f.i64(t->get_value().i);
    }
    f.u64(t->get_ragged_offset() ? 1 : 0);
  };
  for (const auto& n : g.nodes()) {
    f.str(n->spec().tag);
    f.u64(uint64_t(n->compute_data_type()));
    for (const auto& a : n->attrs()) hash_attr(f, a);
    f.u64(n->inputs().size());
    for (const auto& t : n->inputs()) tensor(t);
    for (const auto& t : n->outputs()) tensor(t);
  }
  return f.h;
}

std::string cache_dir() {
  if (const char* d = std::getenv("OPENDNN_CACHE_DIR"); d && *d) return d;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/opendnn";
  return {};
}

std::string cache_path(const Graph& g, const Target& t) {
  std::string dir = cache_dir();
  if (dir.empty()) return {};
  return dir + "/plans-" + hex64(graph_fingerprint(g)) + "-" + sanitize(device_string(t)) + "-v" + kVersion + ".txt";
}

bool read(const std::string& path, uint64_t fingerprint, const std::string& device, std::vector<Entry>& out) {
  out.clear();
  if (path.empty()) return false;
  // Only a regular file is read: a FIFO, device or socket at the path is ignored without blocking.
  std::string text;
  serialize::InputFile f;
  Status s = f.open(path, /*regular_only=*/true);
  if (s.is_bad() && f.open_errno() == ENOENT) return false;  // no entry yet: not an error
  if (s.is_good()) s = f.read_all(kMaxFileBytes, "plan cache file", text);
  if (s.is_bad()) {
    warn(path, s.message());
    return false;
  }
  std::istringstream in(text);
  std::string word, value;
  int format = 0;
  if (!(in >> word >> format) || word != "opendnn-plan-cache" || format != 1) {
    warn(path, "not an opendnn plan cache file (format 1)");
    return false;
  }
  auto field = [&](const char* name, const std::string& want) -> bool {
    if (!(in >> word >> value) || word != name) {
      warn(path, std::string("malformed '") + name + "' line");
      return false;
    }
    if (value != want) {
      warn(path, std::string("written for ") + name + " " + value + ", not " + want);
      return false;
    }
    return true;
  };
  if (!field("key", hex64(fingerprint)) || !field("device", device) || !field("version", kVersion)) return false;
  int64_t count = -1;
  if (!(in >> word >> count) || word != "plans" || count < 0 || count > 100000) {
    warn(path, "malformed 'plans' line");
    return false;
  }
  std::vector<Entry> entries;
  for (int64_t i = 0; i < count; ++i) {
    Entry e;
    if (!(in >> e.engine_id >> e.local_index >> e.measured_us)) {
      warn(path, "malformed plan line " + std::to_string(i));
      return false;
    }
    if (!known_engine(e.engine_id)) {
      warn(path, "plan line " + std::to_string(i) + " names engine id " + std::to_string(e.engine_id) +
                     ", which no registered engine has; that line is skipped");
      continue;
    }
    entries.push_back(e);
  }
  if (!(in >> word) || word != "end") {
    warn(path, "truncated (no 'end' line)");
    return false;
  }
  out = std::move(entries);
  return true;
}

Status write(const std::string& path, uint64_t fingerprint, const std::string& device,
             const std::vector<Entry>& entries) {
  if (path.empty()) return {ErrorCode::INVALID_VALUE, "no plan cache directory (set OPENDNN_CACHE_DIR or HOME)"};
  std::filesystem::path p(path);
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return {ErrorCode::INVALID_VALUE, "cannot create " + p.parent_path().string() + ": " + ec.message()};

  std::string text = "opendnn-plan-cache 1\nkey " + hex64(fingerprint) + "\ndevice " + device + "\nversion " +
                     kVersion + "\nplans " + std::to_string(entries.size()) + "\n";
  for (const auto& e : entries) {
    char line[96];
    std::snprintf(line, sizeof line, "%" PRId64 " %" PRId64 " %.3f\n", e.engine_id, e.local_index, e.measured_us);
    text += line;
  }
  text += "end\n";

  static std::atomic<uint64_t> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
                    hex64(uint64_t(reinterpret_cast<uintptr_t>(&text)));
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) return {ErrorCode::INVALID_VALUE, serialize::os_error("write", tmp, errno)};
  int err = 0;
  if (std::fwrite(text.data(), 1, text.size(), fp) != text.size() || std::fflush(fp) != 0 || ::fsync(::fileno(fp)) != 0)
    err = errno;
  if (std::fclose(fp) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    return {ErrorCode::INVALID_VALUE, serialize::os_error("write", path, err)};
  }
  return {};
}

}  // namespace opendnn::plan_cache
