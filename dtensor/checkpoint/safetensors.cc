#include "dtensor/checkpoint/safetensors.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cstring>
#include <set>

#include "core/error.h"
#include "dtensor/checkpoint/file_io.h"

namespace dt::checkpoint {
namespace {

namespace json = boost::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the safetensors library's own limit

// The safetensors names are a column of core/dtype.h's table.
struct DtypeName {
  DType dtype;
  const char* name;
};
constexpr DtypeName kNames[] = {
#define DT_ST_NAME_(n, type, str, fp, long_name, c_name, c_code, dl_code, st_name, ...) {DType::n, st_name},
    DT_FOR_EACH_DTYPE(DT_ST_NAME_)
#undef DT_ST_NAME_
};

[[noreturn]] void bad(const std::string& file, const std::string& what) {
  DT_THROW(InvalidArgument, "safetensors file '", file, "': ", what);
}

uint64_t le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON number that is a non-negative integer below 2^62, or nullopt.
std::optional<int64_t> as_count(const json::value& v) {
  if (v.is_int64() && v.get_int64() >= 0 && v.get_int64() < (int64_t(1) << 62)) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() < (uint64_t(1) << 62)) return int64_t(v.get_uint64());
  return std::nullopt;
}

SafetensorsEntry parse_entry(const std::string& name, const json::value& v, const std::string& file) {
  if (!v.is_object()) bad(file, "entry '" + name + "' is not an object");
  const json::object& o = v.get_object();
  SafetensorsEntry e;
  e.name = name;
  const json::value* dtype = o.if_contains("dtype");
  if (dtype == nullptr || !dtype->is_string()) bad(file, "entry '" + name + "' has no dtype string");
  const std::string dname(dtype->get_string());
  const auto dt = dtype_from_safetensors(dname);
  if (!dt) bad(file, "entry '" + name + "' has dtype '" + dname + "', which dtensor does not support");
  e.dtype = *dt;
  const json::value* shape = o.if_contains("shape");
  if (shape == nullptr || !shape->is_array()) bad(file, "entry '" + name + "' has no shape array");
  if (shape->get_array().size() > 64) bad(file, "entry '" + name + "' has more than 64 dims");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json::value& s : shape->get_array()) {
    const auto n = as_count(s);
    if (!n) bad(file, "entry '" + name + "' has a shape entry that is not a size: " + json::serialize(s));
    e.shape.push_back(*n);
    if (*n != 0 && numel > (uint64_t(1) << 62) / uint64_t(*n)) overflow = true;
    numel *= uint64_t(*n);
  }
  if (overflow && numel != 0) bad(file, "entry '" + name + "' has a shape too large to address");
  const json::value* offs = o.if_contains("data_offsets");
  if (offs == nullptr || !offs->is_array() || offs->get_array().size() != 2)
    bad(file, "entry '" + name + "' has no data_offsets [begin, end]");
  const auto b = as_count(offs->get_array()[0]);
  const auto en = as_count(offs->get_array()[1]);
  if (!b || !en || *en < *b) bad(file, "entry '" + name + "' has bad data_offsets " + json::serialize(*offs));
  e.begin = uint64_t(*b);
  e.end = uint64_t(*en);
  const uint64_t expect = numel * dtype_size(e.dtype);
  if (e.end - e.begin != expect)
    bad(file, str_cat("entry '", name, "' holds ", e.end - e.begin, " bytes but its shape ", shape_str(e.shape), " of ",
                      dname, " needs ", expect));
  return e;
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& n : kNames)
    if (n.dtype == dtype) return n.name;
  DT_THROW(Unsupported, "safetensors has no name for dtype ", dtype_name(dtype));
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& n : kNames)
    if (name == n.name) return n.dtype;
  return std::nullopt;
}

std::string encode_safetensors_header(std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata) {
  json::object root;
  if (!metadata.empty()) {
    json::object meta;
    for (const auto& [k, v] : metadata) meta[k] = v;
    root["__metadata__"] = std::move(meta);
  }
  uint64_t pos = 0;
  for (SafetensorsEntry& e : entries) {
    DT_CHECK_ARG(e.name != "__metadata__", "a tensor cannot be named __metadata__");
    e.begin = pos;
    e.end = pos + uint64_t(shape_numel(e.shape)) * dtype_size(e.dtype);
    pos = e.end;
    json::array shape;
    for (int64_t s : e.shape) shape.push_back(s);
    json::object o;
    o["dtype"] = safetensors_dtype_name(e.dtype);
    o["shape"] = std::move(shape);
    o["data_offsets"] = json::array{e.begin, e.end};
    root[e.name] = std::move(o);
  }
  std::string text = json::serialize(root);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((text.size() >> (8 * i)) & 0xFF);
  return out + text;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, std::optional<uint64_t> data_bytes,
                                           const std::string& file) {
  json::parse_options opts;
  opts.max_depth = 8;
  boost::system::error_code ec;
  const json::value root = json::parse(text, ec, {}, opts);
  if (ec) bad(file, "the header is not valid JSON (" + ec.message() + ")");
  if (!root.is_object()) bad(file, "the header is not a JSON object");
  SafetensorsHeader h;
  h.data_start = 8 + text.size();
  std::set<std::string> seen;
  for (const auto& kv : root.get_object()) {
    const std::string key(kv.key());
    if (!seen.insert(key).second) bad(file, "entry '" + key + "' appears twice");
    if (key == "__metadata__") {
      if (!kv.value().is_object()) bad(file, "__metadata__ is not an object");
      for (const auto& m : kv.value().get_object()) {
        if (!m.value().is_string()) bad(file, "__metadata__ value of '" + std::string(m.key()) + "' is not a string");
        h.metadata[std::string(m.key())] = std::string(m.value().get_string());
      }
      continue;
    }
    h.tensors.push_back(parse_entry(key, kv.value(), file));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const auto& a, const auto& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const SafetensorsEntry& e = h.tensors[i];
    if (data_bytes && e.end > *data_bytes)
      bad(file, str_cat("entry '", e.name, "' ends at byte ", e.end, " of the data but the file holds ", *data_bytes,
                        " (truncated?)"));
    if (i > 0 && e.begin < h.tensors[i - 1].end && e.end > e.begin)
      bad(file, "entries '" + h.tensors[i - 1].name + "' and '" + e.name + "' overlap");
  }
  return h;
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  File f(path, File::Mode::kRead);
  const uint64_t size = f.size();
  if (size < 8) bad(path, str_cat("the file has ", size, " bytes, fewer than the 8 of the header length"));
  unsigned char len_bytes[8];
  f.read_at(len_bytes, 8, 0, "the header length");
  const uint64_t len = le64(len_bytes);
  if (len > kMaxHeaderBytes) bad(path, str_cat("the header length ", len, " is above the format's limit of 100 MB"));
  if (len > size - 8)
    bad(path, str_cat("the header length ", len, " runs past the end of the file (", size, " bytes)"));
  std::string text(len, '\0');
  f.read_at(text.data(), len, 8, "the header");
  return parse_safetensors_header(text, size - 8 - len, path);
}

}  // namespace dt::checkpoint
