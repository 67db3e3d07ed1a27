// SPDX-License-Identifier: Apache-2.0
// Text-level JSON: a bounded SAX parser (nlohmann's DOM parser has no depth or size limit), the
// printer used for Graph JSON v2, and FNV-1a for Graph::key().
#include <exception>
#include <string>

#include "serialize/json_detail.h"

namespace opendnn::serialize {

namespace {

// Builds a Json DOM from SAX events, refusing documents deeper than kMaxDepth, with more than
// kMaxValues values, or with a key repeated in one object.
class BoundedDomBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  explicit BoundedDomBuilder(Json& root) : root_(root) {}

  bool null() { return put(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return put(Json(v)) != nullptr; }
  bool number_integer(number_integer_t v) { return put(Json(v)) != nullptr; }
  bool number_unsigned(number_unsigned_t v) { return put(Json(v)) != nullptr; }
  bool number_float(number_float_t v, const string_t&) { return put(Json(v)) != nullptr; }
  bool string(string_t& v) { return put(Json(std::move(v))) != nullptr; }
  bool binary(binary_t&) { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    Json* top = stack_.back();
    if (top->contains(k)) return fail("key \"" + k + "\" appears twice in one object");
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> "parse error at ..."
    if (auto p = what.find("] "); p != std::string::npos && what.rfind("[json.exception", 0) == 0) what = what.substr(p + 2);
    return fail(what);
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(std::string msg) {
    if (error_.empty()) error_ = std::move(msg);
    return false;
  }
  Json* put(Json v) {
    if (++values_ > kMaxValues) {
      fail("the document has more than " + std::to_string(kMaxValues) + " values");
      return nullptr;
    }
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    // Objects: a container that is still open is never moved, so pointers on the stack stay valid.
    auto& obj = top->get_ref<Json::object_t&>();
    auto it = obj.emplace(std::move(key_), std::move(v)).first;
    return &it->second;
  }
  bool open(Json empty) {
    if (stack_.size() >= size_t(kMaxDepth))
      return fail("the document nests deeper than " + std::to_string(kMaxDepth) + " levels");
    Json* slot = put(std::move(empty));
    if (!slot) return false;
    stack_.push_back(slot);
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  Json& root_;
  std::vector<Json*> stack_;
  std::string key_;
  std::string error_;
  size_t values_ = 0;
};

std::string scalar_text(const OJson& j) { return j.dump(-1, ' ', false, OJson::error_handler_t::replace); }

// One line, with a space after ':' and ','.
void inline_text(const OJson& j, std::string& out) {
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += scalar_text(OJson(it.key()));
      out += ": ";
      inline_text(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += ", ";
      inline_text(j[i], out);
    }
    out += ']';
  } else {
    out += scalar_text(j);
  }
}

bool all_scalars(const OJson& j) {
  for (const auto& v : j)
    if (v.is_structured()) return false;
  return true;
}

// An object of scalars and arrays of scalars (a tensor entry, a context) stays on one line.
bool flat(const OJson& j) {
  for (const auto& v : j)
    if (v.is_object() || (v.is_array() && !all_scalars(v))) return false;
  return true;
}

constexpr size_t kLineWidth = 110;

void pretty_text(const OJson& j, size_t indent, std::string& out) {
  std::string one;
  inline_text(j, one);
  if (!j.is_structured() || j.empty() || indent + one.size() <= kLineWidth || (j.is_array() && all_scalars(j)) || (j.is_object() && flat(j))) {
    out += one;
    return;
  }
  std::string pad(indent + 2, ' ');
  out += j.is_object() ? "{\n" : "[\n";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ",\n";
    first = false;
    out += pad;
    if (j.is_object()) {
      out += scalar_text(OJson(it.key()));
      out += ": ";
    }
    pretty_text(it.value(), indent + 2, out);
  }
  out += '\n';
  out += std::string(indent, ' ');
  out += j.is_object() ? '}' : ']';
}

}  // namespace

Status parse_document(std::string_view text, Json& out) {
  if (text.size() > kMaxDocumentBytes)
    return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "malformed JSON: the document is larger than " +
                                                     std::to_string(kMaxDocumentBytes >> 20) + " MiB"};
  try {
    Json doc;
    BoundedDomBuilder builder(doc);
    bool ok = Json::sax_parse(text.begin(), text.end(), &builder);
    if (!ok) {
      std::string why = builder.error().empty() ? std::string("parse error") : builder.error();
      return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "malformed JSON: " + why};
    }
    out = std::move(doc);
    return {};
  } catch (const std::exception& e) {
    return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, std::string("malformed JSON: ") + e.what()};
  } catch (...) {
    return {ErrorCode::UNSUPPORTED_GRAPH_FORMAT, "malformed JSON"};
  }
}

bool enum_member(const char* choices, std::string_view s) {
  std::string_view c = choices ? choices : "";
  size_t pos = 0;
  while (pos <= c.size()) {
    size_t bar = c.find('|', pos);
    if (bar == std::string_view::npos) bar = c.size();
    if (bar > pos && c.substr(pos, bar - pos) == s) return true;
    pos = bar + 1;
  }
  return false;
}

std::string to_text(const OJson& j, bool pretty) {
  if (!pretty) return j.dump(-1, ' ', false, OJson::error_handler_t::replace);
  std::string out;
  pretty_text(j, 0, out);
  out += '\n';
  return out;
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace opendnn::serialize
