// dtplan: prints the layout of a sharded tensor on a mesh (every rank's coordinate, local shape, global offset and
// bytes) and, given a target, the redistribution plan with the bytes each step moves per rank and its cost.
// Pure placement math: nothing is communicated. Exit codes: 0 ok, 2 bad arguments or unsupported request.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "placement/layout.h"
#include "placement/mesh_shape.h"
#include "placement/planner.h"
#include "placement/sharding_spec.h"
#include "tools/args.h"
#include "tools/dtplan_parse.h"

namespace {

constexpr const char* kUsage = R"(usage: dtplan --shape SIZES --mesh SIZES --from SPEC [--to SPEC] [options]

Prints every rank's mesh coordinate, local shape, global offset and bytes held for a tensor of global shape SIZES
laid out as SPEC on a mesh, and with --to the cheapest redistribution plan (1-d steps, bytes moved per rank, cost).

  --shape SIZES    global tensor shape, comma separated: 7,5 (an empty string is a 0-d tensor)
  --mesh SIZES     mesh sizes, comma separated: 2,3 (row-major: rank = coordinate[0] * 3 + coordinate[1])
  --names NAMES    optional mesh dim names, comma separated: dp,tp
  --from SPEC      source placements, one per mesh dim
  --to SPEC        target placements; prints the plan from --from to --to
  --dtype NAME     element type for byte counts (default f32): f32 f64 f16 bf16 i8 i32 i64 u8 bool
  --json           print one JSON object instead of text:
                   {"ranks":[{"rank":0,"coord":[0,0],"local_shape":[4,5],"offset":[0,0],"bytes":80},...],
                    "plan":[{"mesh_dim":1,"kind":"all_gather",...}],"cost":...} (plan and cost only with --to)
  -h, --help       this text

SPEC is comma separated, one placement per mesh dim:
  S(d)       Shard tensor dim d (negative d counts from the end); uneven sizes follow torch.chunk
  R          Replicate
  P(op)      Partial with op = sum, avg, max, min or product (P alone is P(sum))
Nested sharding: when several mesh dims shard one tensor dim they split it in ascending mesh dim order by default
(the first splits the dim, the next splits each chunk). For another order give every Shard of that tensor dim its
position in the order as a suffix [k], k = 0 being the first (outermost) splitter:
  S(0)[1],S(0)[0]   mesh dim 1 splits tensor dim 0 first, then mesh dim 0 splits each chunk (FSDP over TP)

Example: dtplan --shape 7,5 --mesh 2,3 --names dp,tp --from 'S(0),R' --to 'R,S(1)'
Exit status: 0 ok, 2 bad arguments (bad spec, dim out of range, non-positive mesh size, placement count not matching
the mesh) or an unsupported redistribution (Shard -> Partial, mixed Partial ops).
)";

using dt::tools::UsageError;

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string json_ints(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

std::string fmt_cost(double v, int digits = 6) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

struct Options {
  std::optional<std::string> shape, mesh, names, from, to;
  std::string dtype = "f32";
  bool json = false;
};

Options parse_args(int argc, char** argv) {
  Options o;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--shape", o.shape) || args.take("--mesh", o.mesh) || args.take("--names", o.names) ||
        args.take("--from", o.from) || args.take("--to", o.to) || args.take("--dtype", o.dtype) ||
        args.take("--json", o.json))
      continue;
    throw args.unexpected();
  }
  if (!o.shape) throw UsageError{"missing --shape (the global tensor shape, e.g. --shape 7,5)"};
  if (!o.mesh) throw UsageError{"missing --mesh (the mesh sizes, e.g. --mesh 2,3)"};
  if (!o.from) throw UsageError{"missing --from (the source placements, e.g. --from 'S(0),R')"};
  return o;
}

struct RankRow {
  int64_t rank;
  std::vector<int64_t> coord;
  dt::LocalLayout layout;
  int64_t bytes;
};

std::vector<RankRow> rank_rows(const dt::MeshShape& mesh, const dt::Shape& shape, const dt::ShardingSpec& spec,
                               size_t elem) {
  std::vector<RankRow> rows;
  for (int64_t r : mesh.ranks()) {
    const std::vector<int64_t> c = mesh.coordinate_of(r);
    dt::LocalLayout l = dt::local_layout(shape, mesh, spec, c);
    const int64_t bytes = l.numel() * static_cast<int64_t>(elem);
    rows.push_back(RankRow{r, c, std::move(l), bytes});
  }
  return rows;
}

std::string rows_json(const std::vector<RankRow>& rows) {
  std::string out = "[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RankRow& r = rows[i];
    out += dt::str_cat(i ? "," : "", "{\"rank\":", r.rank, ",\"coord\":", json_ints(r.coord),
                       ",\"local_shape\":", json_ints(r.layout.shape), ",\"offset\":", json_ints(r.layout.offset),
                       ",\"bytes\":", r.bytes, "}");
  }
  return out + "]";
}

void print_rows(const std::vector<RankRow>& rows) {
  std::printf("  %5s  %-12s  %-14s  %-14s  %10s\n", "rank", "coord", "local_shape", "offset", "bytes");
  for (const RankRow& r : rows) {
    std::printf("  %5lld  %-12s  %-14s  %-14s  %10lld\n", static_cast<long long>(r.rank),
                dt::shape_str(r.coord).c_str(), dt::shape_str(r.layout.shape).c_str(),
                dt::shape_str(r.layout.offset).c_str(), static_cast<long long>(r.bytes));
  }
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  dt::tools::dtplan::Texts texts{*o.shape, *o.mesh, o.names, *o.from, o.to, o.dtype};
  const dt::tools::dtplan::Request req = dt::tools::dtplan::parse_request(texts);
  const dt::Shape& shape = req.shape;
  const dt::MeshShape& mesh = req.mesh;
  const dt::DType dtype = req.dtype;
  const size_t elem = dt::dtype_size(dtype);
  const dt::ShardingSpec& src = req.from;
  const std::optional<dt::ShardingSpec>& dst = req.to;

  const std::vector<RankRow> rows = rank_rows(mesh, shape, src, elem);
  std::optional<dt::Plan> plan;
  std::vector<RankRow> dst_rows;
  if (dst) {
    plan = dt::plan_redistribution_uncached(mesh, shape, elem, src, *dst);  // Unsupported -> exit 2 in main
    dst_rows = rank_rows(mesh, shape, *dst, elem);
  }

  if (o.json) {
    std::string out = dt::str_cat("{\"mesh\":", json_ints(mesh.sizes()), ",\"names\":[");
    for (size_t i = 0; i < mesh.names().size(); ++i)
      out += dt::str_cat(i ? "," : "", "\"", json_escape(mesh.names()[i]), "\"");
    out += dt::str_cat("],\"shape\":", json_ints(shape), ",\"dtype\":\"", dt::dtype_name(dtype),
                       "\",\"elem_size\":", elem, ",\"from\":\"", src.to_string(), "\",\"ranks\":", rows_json(rows));
    if (plan) {
      out += dt::str_cat(",\"to\":\"", dst->to_string(), "\",\"target_ranks\":", rows_json(dst_rows), ",\"plan\":[");
      for (size_t i = 0; i < plan->steps.size(); ++i) out += (i ? "," : "") + plan->steps[i].to_json();
      out += dt::str_cat("],\"cost\":", fmt_cost(plan->cost, 12), ",\"bytes_moved\":", plan->bytes_moved());
    }
    std::printf("%s}\n", out.c_str());
    return 0;
  }

  std::printf("%s, %lld ranks; global shape %s, %s (%zu bytes per element, %lld bytes in all)\n",
              mesh.to_string().c_str(), static_cast<long long>(mesh.numel()), dt::shape_str(shape).c_str(),
              dt::dtype_name(dtype), elem, static_cast<long long>(dt::shape_numel(shape) * static_cast<int64_t>(elem)));
  std::printf("from %s%s\n", src.to_string().c_str(),
              dt::is_evenly_sharded(shape, mesh, src) ? "" : " (uneven: trailing ranks hold short or empty shards)");
  print_rows(rows);
  if (plan) {
    std::printf("to %s%s\n", dst->to_string().c_str(),
                dt::is_evenly_sharded(shape, mesh, *dst) ? "" : " (uneven: trailing ranks hold short or empty shards)");
    print_rows(dst_rows);
    std::printf("plan: %zu step%s, %lld bytes moved per rank, cost %s s\n", plan->steps.size(),
                plan->steps.size() == 1 ? "" : "s", static_cast<long long>(plan->bytes_moved()),
                fmt_cost(plan->cost).c_str());
    for (size_t i = 0; i < plan->steps.size(); ++i) {
      const dt::PlanStep& s = plan->steps[i];
      std::printf(
          "  %zu. mesh dim %s: %-14s %s -> %s  (group %lld, %lld B/rank moved, %lld B copied, cost %s s)  %s -> %s\n",
          i + 1, mesh.dim_label(s.mesh_dim).c_str(), dt::step_kind_name(s.kind), dt::to_string(s.from).c_str(),
          dt::to_string(s.to).c_str(), static_cast<long long>(s.group_size), static_cast<long long>(s.bytes_moved),
          static_cast<long long>(s.bytes_copied), fmt_cost(s.cost).c_str(), s.before.to_string().c_str(),
          s.after.to_string().c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    return dt::tools::report_usage_error("dtplan", e);
  } catch (const dt::InvalidArgument& e) {
    std::fprintf(stderr, "dtplan: %s\n", e.what());
    return 2;
  } catch (const dt::Unsupported& e) {
    std::fprintf(stderr, "dtplan: unsupported: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtplan: error: %s\n", e.what());
    return 1;
  }
}
