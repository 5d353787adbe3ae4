// dtckpt: inspects, verifies and exports sharded checkpoints (dtensor/checkpoint/checkpoint.h) from the command line,
// one process, no communication. `info` also reads a plain safetensors file or a Hugging Face index.
// Exit codes: 0 ok, 1 a problem with the files (damaged, missing, not a checkpoint, none found), 2 bad arguments.
#include <algorithm>
#include <boost/json.hpp>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/safetensors.h"
#include "tools/args.h"
#include "tools/progress.h"

namespace {

namespace ckpt = dt::checkpoint;
namespace json = boost::json;
namespace fs = std::filesystem;

constexpr const char* kUsage = R"(usage: dtckpt COMMAND PATH [options]

Commands:
  info PATH [--chunks] [--json]
      The checkpoint's save id, world size, checksum page size and metadata, then one row per tensor: name, dtype,
      global shape, the spec it was saved from, number of chunks, bytes; and totals. PATH is a checkpoint folder, a
      plain .safetensors file or a Hugging Face index (*.safetensors.index.json).
      --chunks  also every chunk: global offset, shape, file, byte range [begin, end) in that file, checksum pages
      --json    one JSON object instead of text:
                {"path":..,"kind":"checkpoint"|"safetensors"|"hf_index","save_id":..,"world_size":..,"page_bytes":..,
                 "metadata":{..},"files":[{"name":..,"bytes":..}],"tensors":[{"name":..,"dtype":"f32","shape":[..],
                 "spec":..,"num_chunks":..,"bytes":..,"chunks":[{"offset":[..],"shape":[..],"file":..,"begin":..,
                 "end":..,"pages":..}]}],"totals":{"tensors":..,"chunks":..,"bytes":..,"file_bytes":..}}
                ("chunks" only with --chunks)
  verify DIR
      Reads every chunk of every tensor of the checkpoint in DIR and checks every page checksum and every file's
      size; prints the bytes checked and the speed. Exit 1 at the first problem (the message names the tensor and
      the file).
  export DIR OUT [--max-shard-size SIZE]
      Rewrites the checkpoint in DIR as plain safetensors that the safetensors package and PyTorch load as ordinary
      tensors: one file OUT (*.safetensors), or with --max-shard-size Hugging Face style shards of at most SIZE
      bytes (a larger tensor gets a file of its own), OUT being their index (*.json, e.g.
      model.safetensors.index.json) and the shards <stem>-00001-of-0000N.safetensors beside it.
      SIZE: bytes, or a number with a unit: KB MB GB TB (powers of 1000) or KiB MiB GiB TiB (powers of 1024), e.g. 5GB.
  latest ROOT
      Prints the newest complete checkpoint folder under ROOT (a folder of checkpoint folders): the greatest "step"
      metadata, folders without one first, by name. Exit 1 when there is none.

  -h, --help  this text

Exit status: 0 ok, 1 a problem with the files (damaged, truncated, missing, not a checkpoint, none found), 2 bad
arguments.
)";

using dt::tools::UsageError;

struct Args {
  std::string command;
  std::vector<std::string> paths;
  bool chunks = false;
  bool json = false;
  std::optional<std::string> max_shard_size;
};

Args parse_args(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--chunks", a.chunks) || args.take("--json", a.json) ||
        args.take("--max-shard-size", a.max_shard_size))
      continue;
    if (args.is_option()) throw args.unexpected();
    if (a.command.empty())
      a.command = args.name();
    else
      a.paths.push_back(args.name());
  }
  if (a.command.empty()) throw UsageError{"missing the command: info, verify, export or latest"};
  struct Command {
    const char* name;
    size_t paths;
    const char* operands;
  };
  static constexpr Command kCommands[] = {
      {"info", 1, "PATH"}, {"verify", 1, "DIR"}, {"export", 2, "DIR OUT"}, {"latest", 1, "ROOT"}};
  const Command* c = nullptr;
  for (const Command& k : kCommands)
    if (a.command == k.name) c = &k;
  if (c == nullptr) throw UsageError{"unknown command '" + a.command + "': expected info, verify, export or latest"};
  if (a.paths.size() != c->paths) {
    throw UsageError{dt::str_cat("dtckpt ", c->name, " expects ", c->operands, ", got ", a.paths.size(), " operand",
                                 a.paths.size() == 1 ? "" : "s")};
  }
  if ((a.chunks || a.json) && a.command != "info")
    throw UsageError{dt::str_cat(a.chunks ? "--chunks" : "--json", " is an option of info, not of ", a.command)};
  if (a.max_shard_size && a.command != "export")
    throw UsageError{"--max-shard-size is an option of export, not of " + a.command};
  return a;
}

// "5GB" -> 5000000000, "1.5MiB" -> 1572864, "4096" -> 4096 (whole bytes, at least 1). Digits with at most one '.',
// then an optional unit (any case).
uint64_t parse_size(const std::string& text) {
  const size_t n = std::min(text.find_first_not_of("0123456789."), text.size());
  const std::string number = text.substr(0, n);
  std::string unit = text.substr(n);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  struct Unit {
    const char* name;
    double bytes;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KIB", 1024.0}, {"MIB", 1048576.0}, {"GIB", 1073741824.0}, {"TIB", 1099511627776.0}};
  const Unit* u = nullptr;
  for (const Unit& k : kUnits)
    if (unit == k.name) u = &k;
  const bool is_number =
      number.find_first_of("0123456789") != std::string::npos && std::count(number.begin(), number.end(), '.') <= 1;
  const double bytes = is_number && u ? std::floor(std::strtod(number.c_str(), nullptr) * u->bytes) : 0;
  if (bytes < 1 || bytes > 1.8e19) {
    throw UsageError{
        "--max-shard-size expects a positive size: bytes or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB "
        "(e.g. 5GB), got '" +
        text + "'"};
  }
  return uint64_t(bytes);
}

// "1 tensor", "3 tensors".
std::string count(uint64_t n, const char* noun) { return dt::str_cat(n, " ", noun, n == 1 ? "" : "s"); }

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

json::array json_ints(const std::vector<int64_t>& v) {
  json::array a;
  for (int64_t x : v) a.push_back(x);
  return a;
}

// ---- info ----

struct Inspected {
  ckpt::Index index;
  std::string kind;                                  // "checkpoint", "safetensors" or "hf_index"
  std::map<std::string, std::string> file_metadata;  // plain files: their __metadata__
};

Inspected inspect(const std::string& path) {
  Inspected in;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    in.index = ckpt::read_checkpoint_index(path);
    in.kind = "checkpoint";
    return in;
  }
  if (!fs::exists(path, ec)) DT_THROW(InvalidArgument, "'", path, "' does not exist");
  in.index = ckpt::index_of_safetensors(path);
  in.kind = ends_with(path, ".json") ? "hf_index" : "safetensors";
  for (const auto& [file, bytes] : in.index.file_bytes)
    for (const auto& [k, v] : ckpt::read_safetensors_header(ckpt::join_path(in.index.dir, file)).metadata)
      in.file_metadata[k] = v;
  return in;
}

// A metadata value for people: numbers in their shortest exact form (0.25, not 2.5E-1), strings quoted.
std::string meta_text(const ckpt::MetaValue& v) {
  if (const double* d = std::get_if<double>(&v)) {
    char buf[40];
    const auto r = std::to_chars(buf, buf + sizeof buf, *d);
    return std::string(buf, r.ptr);
  }
  return ckpt::meta_to_string(v);
}

uint64_t page_count(const ckpt::StoredChunk& c) { return c.page_crcs.size(); }

int info(const std::string& path, bool with_chunks, bool as_json) {
  const Inspected in = inspect(path);
  const ckpt::Index& ix = in.index;
  uint64_t total_bytes = 0, total_chunks = 0, file_bytes = 0;
  for (const ckpt::StoredTensor& t : ix.tensors) {
    total_bytes += t.nbytes();
    total_chunks += t.chunks.size();
  }
  for (const auto& [f, b] : ix.file_bytes) file_bytes += b;

  if (as_json) {
    json::object root;
    root["path"] = path;
    root["kind"] = in.kind;
    root["save_id"] = ix.save_id;
    root["world_size"] = ix.world_size;
    root["page_bytes"] = ix.page_bytes;
    json::object meta;
    for (const auto& [k, v] : ix.metadata) meta[k] = json::parse(ckpt::meta_to_string(v));
    for (const auto& [k, v] : in.file_metadata) meta[k] = v;
    root["metadata"] = std::move(meta);
    json::array files;
    for (const auto& [f, b] : ix.file_bytes) files.push_back(json::object{{"name", f}, {"bytes", b}});
    root["files"] = std::move(files);
    json::array tensors;
    for (const ckpt::StoredTensor& t : ix.tensors) {
      json::object o{{"name", t.name}, {"dtype", dt::dtype_name(t.dtype)}, {"shape", json_ints(t.shape)},
                     {"spec", t.spec}, {"num_chunks", t.chunks.size()},    {"bytes", t.nbytes()}};
      if (with_chunks) {
        json::array chunks;
        for (const ckpt::StoredChunk& c : t.chunks) {
          chunks.push_back(json::object{{"offset", json_ints(c.box.offset)},
                                        {"shape", json_ints(c.box.shape)},
                                        {"file", c.file},
                                        {"begin", c.begin},
                                        {"end", c.begin + c.bytes},
                                        {"pages", page_count(c)}});
        }
        o["chunks"] = std::move(chunks);
      }
      tensors.push_back(std::move(o));
    }
    root["tensors"] = std::move(tensors);
    root["totals"] = json::object{
        {"tensors", ix.tensors.size()}, {"chunks", total_chunks}, {"bytes", total_bytes}, {"file_bytes", file_bytes}};
    std::printf("%s\n", json::serialize(root).c_str());
    return 0;
  }

  if (in.kind == "checkpoint") {
    std::printf("checkpoint %s: save id %s, world size %lld, checksum pages of %llu bytes (CRC-32C)\n", path.c_str(),
                ix.save_id.c_str(), static_cast<long long>(ix.world_size),
                static_cast<unsigned long long>(ix.page_bytes));
  } else {
    std::printf("%s %s (no checksums)\n", in.kind == "hf_index" ? "Hugging Face index" : "safetensors file",
                path.c_str());
  }
  // Each parameter's optimizer step (Note [Training state names]) is summarised in one entry.
  std::string meta;
  std::map<std::string, int64_t> param_steps;
  for (const auto& [k, v] : ix.metadata) {
    const bool param_step = k.rfind("optim.state.", 0) == 0 && k.size() > 5 && k.compare(k.size() - 5, 5, ".step") == 0;
    if (param_step && std::holds_alternative<int64_t>(v)) {
      ++param_steps[meta_text(v)];
      continue;
    }
    meta += dt::str_cat(meta.empty() ? "" : ", ", k, "=", meta_text(v));
  }
  for (const auto& [value, n] : param_steps)
    meta += dt::str_cat(meta.empty() ? "" : ", ", "optim.state.*.step=", value, " (", n, " parameters)");
  for (const auto& [k, v] : in.file_metadata) meta += dt::str_cat(meta.empty() ? "" : ", ", k, "=", v);
  std::printf("metadata: %s\n", meta.empty() ? "(none)" : meta.c_str());
  std::printf("files: %zu, %llu bytes\n", ix.file_bytes.size(), static_cast<unsigned long long>(file_bytes));

  size_t w_name = 4, w_shape = 5, w_spec = 4;
  for (const ckpt::StoredTensor& t : ix.tensors) {
    w_name = std::max(w_name, t.name.size());
    w_shape = std::max(w_shape, dt::shape_str(t.shape).size());
    w_spec = std::max(w_spec, t.spec.size());
  }
  std::printf("  %-*s  %-5s  %-*s  %-*s  %6s  %14s\n", int(w_name), "name", "dtype", int(w_shape), "shape", int(w_spec),
              "spec", "chunks", "bytes");
  for (const ckpt::StoredTensor& t : ix.tensors) {
    std::printf("  %-*s  %-5s  %-*s  %-*s  %6zu  %14llu\n", int(w_name), t.name.c_str(), dt::dtype_name(t.dtype),
                int(w_shape), dt::shape_str(t.shape).c_str(), int(w_spec), t.spec.empty() ? "-" : t.spec.c_str(),
                t.chunks.size(), static_cast<unsigned long long>(t.nbytes()));
    if (!with_chunks) continue;
    for (const ckpt::StoredChunk& c : t.chunks) {
      std::printf("      offset %s shape %s  %s bytes [%llu, %llu)  %s\n", dt::shape_str(c.box.offset).c_str(),
                  dt::shape_str(c.box.shape).c_str(), c.file.c_str(), static_cast<unsigned long long>(c.begin),
                  static_cast<unsigned long long>(c.begin + c.bytes), count(page_count(c), "page").c_str());
    }
  }
  std::printf("total: %s, %s, %llu bytes\n", count(ix.tensors.size(), "tensor").c_str(),
              count(total_chunks, "chunk").c_str(), static_cast<unsigned long long>(total_bytes));
  return 0;
}

// ---- verify, export, latest ----

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void require_folder(const std::string& path, const char* command) {
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
    throw UsageError{dt::str_cat("dtckpt ", command, " reads a checkpoint folder; '", path,
                                 "' is a file (dtckpt info reads a plain safetensors file or index)")};
  }
}

// For a folder of checkpoint folders given where one checkpoint was expected: which one is the newest.
std::string root_hint(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || ckpt::file_exists(ckpt::join_path(dir, ckpt::kIndexName))) return "";
  std::optional<std::string> newest;
  try {
    newest = ckpt::latest(dir);
  } catch (const dt::Error&) {
  }
  return newest ? "; it holds checkpoint folders, the newest being '" + *newest + "' (dtckpt latest)" : "";
}

int verify(const std::string& dir) {
  require_folder(dir, "verify");
  const auto start = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  try {
    bytes = ckpt::verify(dir);
  } catch (const dt::Error& e) {
    std::fprintf(stderr, "dtckpt: verify %s: FAILED: %s%s\n", dir.c_str(), e.what(), root_hint(dir).c_str());
    return 1;
  }
  const double s = seconds_since(start);
  const ckpt::Index ix = ckpt::read_checkpoint_index(dir);
  std::printf("verified %s: %s in %s, %llu bytes checked in %.3f s, %.2f GB/s: ok\n", dir.c_str(),
              count(ix.tensors.size(), "tensor").c_str(), count(ix.file_bytes.size(), "file").c_str(),
              static_cast<unsigned long long>(bytes), s, s > 0 ? double(bytes) / s / 1e9 : 0.0);
  return 0;
}

int export_to(const std::string& dir, const std::string& out, const std::optional<std::string>& max_shard_size) {
  require_folder(dir, "export");
  ckpt::ExportOptions options;
  if (max_shard_size) {
    options.max_shard_bytes = parse_size(*max_shard_size);
    if (!ends_with(out, ".json")) {
      throw UsageError{
          "with --max-shard-size OUT names the shards' index and must end in .json (e.g. "
          "model.safetensors.index.json), got '" +
          out + "'"};
    }
  } else if (!ends_with(out, ".safetensors")) {
    throw UsageError{"OUT must end in .safetensors (or name a .json index with --max-shard-size), got '" + out + "'"};
  }
  const auto start = std::chrono::steady_clock::now();
  options.progress = dt::tools::ProgressBar("exporting " + dir);
  ckpt::export_checkpoint(dir, out, options);
  const double s = seconds_since(start);
  // Read back what was written: the headers parse and the files have the sizes they announce.
  const ckpt::Index written = ckpt::index_of_safetensors(out);
  uint64_t bytes = 0;
  for (const auto& [f, b] : written.file_bytes) bytes += b;
  std::printf("exported %s to %s: %s, %s, %llu bytes in %.3f s\n", dir.c_str(), out.c_str(),
              count(written.tensors.size(), "tensor").c_str(), count(written.file_bytes.size(), "file").c_str(),
              static_cast<unsigned long long>(bytes), s);
  if (max_shard_size) {
    for (const auto& [f, b] : written.file_bytes)
      std::printf("  %s  %llu bytes\n", ckpt::join_path(written.dir, f).c_str(), static_cast<unsigned long long>(b));
  }
  return 0;
}

int latest(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    std::fprintf(stderr, "dtckpt: latest: '%s' is not a folder\n", root.c_str());
    return 1;
  }
  const std::optional<std::string> dir = ckpt::latest(root);
  if (!dir) {
    std::fprintf(stderr, "dtckpt: latest: no complete checkpoint under '%s'\n", root.c_str());
    return 1;
  }
  std::printf("%s\n", dir->c_str());
  return 0;
}

int run(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  if (a.command == "latest") return latest(a.paths[0]);
  try {
    if (a.command == "info") return info(a.paths[0], a.chunks, a.json);
    if (a.command == "verify") return verify(a.paths[0]);
    return export_to(a.paths[0], a.paths[1], a.max_shard_size);
  } catch (const dt::InvalidArgument& e) {
    throw std::runtime_error(e.what() + root_hint(a.paths[0]));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    return dt::tools::report_usage_error("dtckpt", e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtckpt: %s\n", e.what());
    return 1;
  }
}
