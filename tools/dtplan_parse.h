// dtplan's parsing of its option values (shape and mesh sizes, mesh dim names, dtype, source and target specs) into a
// checked request: everything dtplan reads from the command line before any placement math. Kept apart from main()
// so that the placement fuzz target (tests/fuzz/placement_parsers_fuzz.cc) exercises the same code the tool runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "placement/mesh_shape.h"
#include "placement/sharding_spec.h"
#include "placement/text_util.h"
#include "tools/args.h"

namespace dt::tools::dtplan {

// Splits a comma-separated list, trimming spaces around items; an optional [...] around the whole is dropped. An
// empty text is an empty list.
inline std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> out;
  if (!text.empty() && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  size_t start = 0;
  while (start <= text.size()) {
    const size_t pos = text.find(',', start);
    std::string item(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    out.push_back(item);
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  if (out.size() == 1 && out[0].empty()) out.clear();
  return out;
}

inline std::vector<int64_t> parse_sizes(std::string_view text, const char* option) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    int64_t v = 0;
    if (!detail::parse_int(item, &v)) {
      throw UsageError{str_cat(option, " expects comma-separated integers, got '", text, "' (bad entry '", item, "')")};
    }
    out.push_back(v);
  }
  return out;
}

inline ShardingSpec parse_spec(const std::string& text, const char* option, const MeshShape& mesh, const Shape& shape) {
  ShardingSpec spec;
  try {
    spec = ShardingSpec::parse(text, static_cast<int64_t>(shape.size()));
  } catch (const InvalidArgument& e) {
    throw UsageError{str_cat(option, " '", text, "': ", e.what())};
  }
  if (spec.mesh_ndim() != mesh.ndim()) {
    throw UsageError{str_cat(option, " '", text, "' has ", spec.mesh_ndim(), " placement",
                             spec.mesh_ndim() == 1 ? "" : "s", " but the mesh ", mesh.to_string(), " has ", mesh.ndim(),
                             " dim", mesh.ndim() == 1 ? "" : "s", " (one placement per mesh dim)")};
  }
  return spec;
}

// The option values as given (nullopt: option absent).
struct Texts {
  std::string shape, mesh;
  std::optional<std::string> names;
  std::string from;
  std::optional<std::string> to;
  std::string dtype = "f32";
};

struct Request {
  Shape shape;
  MeshShape mesh;
  DType dtype;
  ShardingSpec from;
  std::optional<ShardingSpec> to;
};

// Throws UsageError naming the option at fault.
inline Request parse_request(const Texts& t) {
  const Shape shape = parse_sizes(t.shape, "--shape");
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) throw UsageError{str_cat("--shape ", shape_str(shape), " has a negative size in dim ", d)};
  }
  const std::vector<int64_t> sizes = parse_sizes(t.mesh, "--mesh");
  std::vector<std::string> names = t.names ? split_list(*t.names) : std::vector<std::string>{};
  std::optional<MeshShape> mesh;
  try {
    mesh.emplace(sizes, names);
  } catch (const InvalidArgument& e) {
    throw UsageError{str_cat("--mesh '", t.mesh, "'", t.names ? " --names '" + *t.names + "'" : "", ": ", e.what())};
  }
  DType dtype = DType::f32;
  try {
    dtype = dtype_from_name(t.dtype);
  } catch (const InvalidArgument& e) {
    throw UsageError{str_cat("--dtype: ", e.what())};
  }
  int64_t bytes = 0;
  try {
    if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes)) {
      throw UsageError{
          str_cat("--shape ", shape_str(shape), " of ", dtype_name(dtype), " has more bytes than an int64 can count")};
    }
  } catch (const InvalidArgument& e) {  // more elements than an int64 can count
    throw UsageError{str_cat("--shape: ", e.what())};
  }
  ShardingSpec from = parse_spec(t.from, "--from", *mesh, shape);
  std::optional<ShardingSpec> to;
  if (t.to) to = parse_spec(*t.to, "--to", *mesh, shape);
  return Request{shape, std::move(*mesh), dtype, std::move(from), std::move(to)};
}

}  // namespace dt::tools::dtplan
