// libFuzzer target: the placement text parsers and dtplan's option parsing.
//   - parse_placement, parse_placements, ShardingSpec::parse without and with a tensor ndim (from the first byte):
//     each accepts or refuses with dt::InvalidArgument; what it accepts must round-trip (to_string, then parse again,
//     gives an equal value with an equal hash).
//   - dtplan's parse_request (tools/dtplan_parse.h) on the input split at newlines into --shape, --mesh, --names,
//     --from, --to, --dtype (a line "-" = option absent): it accepts or refuses with a UsageError; on a small
//     accepted request, the layouts and the plan dtplan would print are computed too (they must not crash either;
//     an unsupported redistribution is dt::Unsupported).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "placement/layout.h"
#include "placement/placement.h"
#include "placement/planner.h"
#include "placement/sharding_spec.h"
#include "tools/dtplan_parse.h"

namespace {

void check(bool ok, const char* what, std::string_view input) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s (input '%.*s')\n", what, static_cast<int>(input.size()), input.data());
    std::abort();
  }
}

void fuzz_placement_parsers(std::string_view text, int64_t ndim) {
  try {
    const dt::Placement p = dt::parse_placement(text);
    check(dt::parse_placement(dt::to_string(p)) == p, "parse_placement round trip", text);
  } catch (const dt::InvalidArgument&) {
  }
  try {
    const std::vector<dt::Placement> v = dt::parse_placements(text);
    check(!v.empty(), "parse_placements returns at least one", text);
    check(dt::parse_placements(dt::to_string(v)) == v, "parse_placements round trip", text);
  } catch (const dt::InvalidArgument&) {
  }
  try {
    const dt::ShardingSpec s = dt::ShardingSpec::parse(text);
    const dt::ShardingSpec again = dt::ShardingSpec::parse(s.to_string());
    check(again == s, "ShardingSpec::parse round trip", text);
    check(std::hash<dt::ShardingSpec>()(again) == std::hash<dt::ShardingSpec>()(s), "equal specs hash equal", text);
  } catch (const dt::InvalidArgument&) {
  }
  try {
    const dt::ShardingSpec s = dt::ShardingSpec::parse(text, ndim);
    check(s.min_tensor_ndim() <= ndim, "a spec parsed for an ndim fits it", text);
    check(dt::ShardingSpec::parse(s.to_string(), ndim) == s, "ShardingSpec::parse(ndim) round trip", text);
    check(dt::ShardingSpec::parse(s.to_string()) == s, "a normalized spec parses the same without ndim", text);
  } catch (const dt::InvalidArgument&) {
  }
}

std::vector<std::string_view> lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (out.size() < 6) {
    const size_t pos = text.find('\n', start);
    out.push_back(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return out;
}

void fuzz_dtplan(std::string_view text) {
  const std::vector<std::string_view> l = lines(text);
  if (l.size() < 4) return;  // --shape, --mesh, --names, --from are the least a request needs
  auto opt = [&](size_t i) -> std::optional<std::string> {
    if (i >= l.size() || l[i] == "-") return std::nullopt;
    return std::string(l[i]);
  };
  dt::tools::dtplan::Texts t{std::string(l[0]),     std::string(l[1]), opt(2), std::string(l[3]), opt(4),
                             opt(5).value_or("f32")};
  std::optional<dt::tools::dtplan::Request> req;
  try {
    req.emplace(dt::tools::dtplan::parse_request(t));
  } catch (const dt::tools::UsageError&) {
    return;
  }
  check(req->from.mesh_ndim() == req->mesh.ndim(), "one placement per mesh dim", text);
  check(dt::ShardingSpec::parse(req->from.to_string(), static_cast<int64_t>(req->shape.size())) == req->from,
        "--from round trip", text);
  // What dtplan computes next, on requests small enough to stay fast.
  if (req->mesh.numel() > 64 || req->shape.size() > 8) return;
  const size_t elem = dt::dtype_size(req->dtype);
  for (const dt::ShardingSpec* spec : {&req->from, req->to ? &*req->to : nullptr}) {
    if (spec == nullptr) continue;
    for (int64_t r : req->mesh.ranks()) {
      const dt::LocalLayout l = dt::local_layout_of_rank(req->shape, req->mesh, *spec, r);
      check(l.shape.size() == req->shape.size(), "local ndim", text);
      for (size_t d = 0; d < l.shape.size(); ++d) {
        check(l.shape[d] >= 0 && l.offset[d] >= 0 && l.offset[d] + l.shape[d] <= req->shape[d], "local box in bounds",
              text);
      }
    }
    dt::is_evenly_sharded(req->shape, req->mesh, *spec);
  }
  if (req->to) {
    try {
      const dt::Plan plan = dt::plan_redistribution_uncached(req->mesh, req->shape, elem, req->from, *req->to);
      check(plan.bytes_moved() >= 0, "bytes moved", text);
    } catch (const dt::Unsupported&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 0x80) {
    fuzz_dtplan(text);
  } else {
    fuzz_placement_parsers(text, data[0] & 0x0f);
  }
  return 0;
}
