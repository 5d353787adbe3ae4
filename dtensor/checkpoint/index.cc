#include "dtensor/checkpoint/index.h"

#include <boost/json.hpp>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "core/crc32c.h"
#include "core/error.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/safetensors.h"

namespace dt::checkpoint {
namespace {

namespace json = boost::json;

constexpr std::string_view kCrcKey = ",\"index_crc32c\":\"";

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  DT_THROW(InvalidArgument, "checkpoint index '", path, "': ", what);
}

std::string hex8(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08" PRIx32, v);
  return buf;
}

std::optional<uint32_t> parse_hex8(std::string_view s) {
  if (s.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return std::nullopt;
    v = (v << 4) | uint32_t(d);
  }
  return v;
}

json::value meta_to_json(const MetaValue& v) {
  return std::visit([](const auto& x) -> json::value { return json::value(x); }, v);
}

// Accessors that name what is missing or wrong.
const json::value& member(const json::object& o, std::string_view key, const std::string& where,
                          const std::string& path) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) bad(path, where + " has no \"" + std::string(key) + "\"");
  return *v;
}
int64_t count_of(const json::value& v, const std::string& what, const std::string& path) {
  if (v.is_int64() && v.get_int64() >= 0 && v.get_int64() < (int64_t(1) << 62)) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() < (uint64_t(1) << 62)) return int64_t(v.get_uint64());
  bad(path, what + " is not a size: " + json::serialize(v));
}
std::string string_of(const json::value& v, const std::string& what, const std::string& path) {
  if (!v.is_string()) bad(path, what + " is not a string");
  return std::string(v.get_string());
}
Shape shape_of(const json::value& v, const std::string& what, const std::string& path) {
  if (!v.is_array() || v.get_array().size() > 64) bad(path, what + " is not a list of at most 64 sizes");
  Shape s;
  for (const json::value& x : v.get_array()) s.push_back(count_of(x, what, path));
  return s;
}

bool plain_file_name(const std::string& f) {
  return !f.empty() && f.find('/') == std::string::npos && f != "." && f != ".." && f.find('\0') == std::string::npos;
}

// A shape's element count, or nullopt when it overflows 2^62.
std::optional<uint64_t> checked_numel(const Shape& s) {
  uint64_t n = 1;
  for (int64_t d : s) {
    if (d == 0) return 0;
    if (n > (uint64_t(1) << 62) / uint64_t(d)) return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

void validate_tensor(const StoredTensor& t, const Index& index) {
  const std::string where = "tensor '" + t.name + "'";
  const auto numel = checked_numel(t.shape);
  if (!numel) bad(index.path, where + " has a shape too large to address");
  uint64_t covered = 0;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const StoredChunk& c = t.chunks[i];
    const std::string cw = str_cat(where, " chunk ", i);
    if (c.box.shape.size() != t.shape.size() || c.box.offset.size() != t.shape.size())
      bad(index.path, cw + " does not have the tensor's number of dims");
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (c.box.offset[d] > t.shape[d] || c.box.shape[d] > t.shape[d] - c.box.offset[d])
        bad(index.path, cw + " lies outside the tensor's shape " + shape_str(t.shape));
    const uint64_t n = uint64_t(c.box.numel());
    if (n == 0) bad(index.path, cw + " is empty");
    if (c.bytes != n * dtype_size(t.dtype))
      bad(index.path, str_cat(cw, " holds ", c.bytes, " bytes, its box needs ", n * dtype_size(t.dtype)));
    const auto fb = index.file_bytes.find(c.file);
    if (fb == index.file_bytes.end())
      bad(index.path, cw + " is in file '" + c.file + "', which the index does not list");
    if (c.begin > fb->second || c.bytes > fb->second - c.begin)
      bad(index.path, str_cat(cw, " runs past the end of '", c.file, "' (", fb->second, " bytes)"));
    if (index.page_bytes != 0 && c.page_crcs.size() != page_count(c.bytes, index.page_bytes))
      bad(index.path, cw + " has the wrong number of page checksums");
    covered += n;
  }
  if (covered != *numel)
    bad(index.path, str_cat(where, " has chunks covering ", covered, " of its ", *numel, " elements"));
  std::vector<Box> boxes;
  for (const StoredChunk& c : t.chunks) boxes.push_back(c.box);
  if (const auto pair = first_overlap(boxes))
    bad(index.path, str_cat(where, " chunk ", pair->second, " overlaps chunk ", pair->first));
}

}  // namespace

std::string encode_crcs(const std::vector<uint32_t>& crcs) {
  std::string s;
  s.reserve(crcs.size() * 8);
  for (uint32_t x : crcs) s += hex8(x);
  return s;
}

std::optional<std::vector<uint32_t>> decode_crcs(std::string_view hex) {
  if (hex.size() % 8 != 0) return std::nullopt;
  std::vector<uint32_t> out;
  out.reserve(hex.size() / 8);
  for (size_t i = 0; i < hex.size(); i += 8) {
    const auto x = parse_hex8(hex.substr(i, 8));
    if (!x) return std::nullopt;
    out.push_back(*x);
  }
  return out;
}

std::string meta_to_string(const MetaValue& v) { return json::serialize(meta_to_json(v)); }

std::string encode_index(const Index& index) {
  json::object root;
  root["format"] = kFormatName;
  root["version"] = kFormatVersion;
  root["save_id"] = index.save_id;
  root["world_size"] = index.world_size;
  root["page_bytes"] = index.page_bytes;
  json::object meta;
  for (const auto& [k, v] : index.metadata) meta[k] = meta_to_json(v);
  root["metadata"] = std::move(meta);
  json::object files;
  for (const auto& [f, n] : index.file_bytes) files[f] = n;
  root["files"] = std::move(files);
  json::array tensors;
  for (const StoredTensor& t : index.tensors) {
    json::object o;
    o["name"] = t.name;
    o["dtype"] = safetensors_dtype_name(t.dtype);
    o["shape"] = json::value_from(t.shape);
    o["spec"] = t.spec;
    json::array chunks;
    for (const StoredChunk& c : t.chunks) {
      json::object co;
      co["offset"] = json::value_from(c.box.offset);
      co["shape"] = json::value_from(c.box.shape);
      co["file"] = c.file;
      co["begin"] = c.begin;
      co["bytes"] = c.bytes;
      co["crc32c"] = encode_crcs(c.page_crcs);
      chunks.push_back(std::move(co));
    }
    o["chunks"] = std::move(chunks);
    tensors.push_back(std::move(o));
  }
  root["tensors"] = std::move(tensors);
  std::string body = json::serialize(root);
  const uint32_t crc = crc32c(body.data(), body.size());
  body.pop_back();  // the closing brace
  return body + std::string(kCrcKey) + hex8(crc) + "\"}\n";
}

Index parse_index(std::string_view text, const std::string& path) {
  // The checksum first: the text must end in ,"index_crc32c":"xxxxxxxx"} and an optional newline.
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  const size_t at = text.rfind(kCrcKey);
  if (at == std::string_view::npos || text.size() != at + kCrcKey.size() + 10 || text.substr(text.size() - 2) != "\"}")
    bad(path, "it does not end with its checksum (\"index_crc32c\"): not a dtensor index, or cut short");
  const auto want = parse_hex8(text.substr(at + kCrcKey.size(), 8));
  if (!want) bad(path, "its checksum is not 8 hex digits");
  std::string body(text.substr(0, at));
  body += '}';
  if (crc32c(body.data(), body.size()) != *want) bad(path, "its checksum does not match its text: the file is damaged");

  json::parse_options opts;
  opts.max_depth = 16;
  boost::system::error_code ec;
  const json::value root_v = json::parse(body, ec, {}, opts);
  if (ec || !root_v.is_object()) bad(path, "it is not a JSON object (" + ec.message() + ")");
  const json::object& root = root_v.get_object();
  Index index;
  index.path = path;
  const size_t slash = path.find_last_of('/');
  index.dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (string_of(member(root, "format", "the index", path), "format", path) != kFormatName)
    bad(path, "its format is not " + std::string(kFormatName));
  const int64_t version = count_of(member(root, "version", "the index", path), "version", path);
  if (version != kFormatVersion)
    bad(path, str_cat("it has format version ", version, "; this dtensor reads version ", kFormatVersion));
  index.save_id = string_of(member(root, "save_id", "the index", path), "save_id", path);
  index.world_size = count_of(member(root, "world_size", "the index", path), "world_size", path);
  index.page_bytes = uint64_t(count_of(member(root, "page_bytes", "the index", path), "page_bytes", path));
  const json::value& meta = member(root, "metadata", "the index", path);
  if (!meta.is_object()) bad(path, "metadata is not an object");
  for (const auto& kv : meta.get_object()) {
    const json::value& v = kv.value();
    const std::string k(kv.key());
    if (v.is_bool()) {
      index.metadata[k] = v.get_bool();
    } else if (v.is_int64()) {
      index.metadata[k] = v.get_int64();
    } else if (v.is_double()) {
      index.metadata[k] = v.get_double();
    } else if (v.is_string()) {
      index.metadata[k] = std::string(v.get_string());
    } else {
      bad(path, "metadata '" + k + "' is not a bool, an integer, a number or a string");
    }
  }
  const json::value& files = member(root, "files", "the index", path);
  if (!files.is_object()) bad(path, "files is not an object");
  for (const auto& kv : files.get_object()) {
    const std::string f(kv.key());
    if (!plain_file_name(f)) bad(path, "file name '" + f + "' is not a plain name inside the folder");
    index.file_bytes[f] = uint64_t(count_of(kv.value(), "the size of '" + f + "'", path));
  }
  const json::value& tensors = member(root, "tensors", "the index", path);
  if (!tensors.is_array()) bad(path, "tensors is not a list");
  std::set<std::string> names;
  for (const json::value& tv : tensors.get_array()) {
    if (!tv.is_object()) bad(path, "a tensor entry is not an object");
    const json::object& to = tv.get_object();
    StoredTensor t;
    t.name = string_of(member(to, "name", "a tensor entry", path), "a tensor's name", path);
    const std::string where = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) bad(path, where + " appears twice");
    const std::string dname = string_of(member(to, "dtype", where, path), where + " dtype", path);
    const auto dt = dtype_from_safetensors(dname);
    if (!dt) bad(path, where + " has the unknown dtype '" + dname + "'");
    t.dtype = *dt;
    t.shape = shape_of(member(to, "shape", where, path), where + " shape", path);
    t.spec = string_of(member(to, "spec", where, path), where + " spec", path);
    const json::value& chunks = member(to, "chunks", where, path);
    if (!chunks.is_array()) bad(path, where + " chunks is not a list");
    for (const json::value& cv : chunks.get_array()) {
      if (!cv.is_object()) bad(path, where + " has a chunk that is not an object");
      const json::object& co = cv.get_object();
      StoredChunk c;
      c.box.offset = shape_of(member(co, "offset", where + " chunk", path), where + " chunk offset", path);
      c.box.shape = shape_of(member(co, "shape", where + " chunk", path), where + " chunk shape", path);
      c.file = string_of(member(co, "file", where + " chunk", path), where + " chunk file", path);
      c.begin = uint64_t(count_of(member(co, "begin", where + " chunk", path), where + " chunk begin", path));
      c.bytes = uint64_t(count_of(member(co, "bytes", where + " chunk", path), where + " chunk bytes", path));
      const auto crcs = decode_crcs(string_of(member(co, "crc32c", where + " chunk", path), where + " crc32c", path));
      if (!crcs) bad(path, where + " has a crc32c list that is not 8 hex digits per page");
      c.page_crcs = *crcs;
      t.chunks.push_back(std::move(c));
    }
    index.tensors.push_back(std::move(t));
  }
  for (const StoredTensor& t : index.tensors) validate_tensor(t, index);
  return index;
}

Index read_index(const std::string& dir) {
  const std::string path = join_path(dir, kIndexName);
  if (!file_exists(path))
    DT_THROW(InvalidArgument, "checkpoint: '", dir, "' holds no complete checkpoint (", kIndexName,
             " is missing: the save did not finish, or this is not a checkpoint folder)");
  return parse_index(read_whole_file(path), path);
}

Index index_of_safetensors(const std::string& path) {
  Index index;
  index.path = path;
  const size_t slash = path.find_last_of('/');
  index.dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;  // name -> file, from a Hugging Face index
  const bool is_hf_index = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  if (is_hf_index) {
    boost::system::error_code ec;
    json::parse_options opts;
    opts.max_depth = 8;
    const json::value root = json::parse(read_whole_file(path), ec, {}, opts);
    if (ec || !root.is_object()) bad(path, "it is not a JSON object");
    const json::value* wm = root.get_object().if_contains("weight_map");
    if (wm == nullptr || !wm->is_object()) bad(path, "it has no \"weight_map\" object");
    std::set<std::string> seen;
    for (const auto& kv : wm->get_object()) {
      const std::string f = string_of(kv.value(), "the file of '" + std::string(kv.key()) + "'", path);
      if (!plain_file_name(f)) bad(path, "file name '" + f + "' is not a plain name inside the folder");
      if (seen.insert(f).second) files.push_back(f);
      weight_map[std::string(kv.key())] = f;
    }
  } else {
    files.push_back(slash == std::string::npos ? path : path.substr(slash + 1));
  }
  std::set<std::string> names;
  for (const std::string& f : files) {
    const std::string fp = join_path(index.dir, f);
    const SafetensorsHeader h = read_safetensors_header(fp);
    File file(fp, File::Mode::kRead);
    index.file_bytes[f] = file.size();
    for (const SafetensorsEntry& e : h.tensors) {
      if (!names.insert(e.name).second) bad(path, "tensor '" + e.name + "' is in more than one file");
      if (is_hf_index && weight_map.count(e.name) && weight_map[e.name] != f)
        bad(path, "tensor '" + e.name + "' is listed in '" + weight_map[e.name] + "' but found in '" + f + "'");
      StoredTensor t;
      t.name = e.name;
      t.dtype = e.dtype;
      t.shape = e.shape;
      if (e.end > e.begin)
        t.chunks.push_back({Box{Shape(e.shape.size(), 0), e.shape}, f, h.data_start + e.begin, e.end - e.begin, {}});
      index.tensors.push_back(std::move(t));
    }
  }
  for (const auto& [name, f] : weight_map)
    if (!names.count(name)) bad(path, "tensor '" + name + "' is listed in '" + f + "', which does not hold it");
  for (const StoredTensor& t : index.tensors) validate_tensor(t, index);
  return index;
}

}  // namespace dt::checkpoint
