#include "placement/placement.h"

#include <cctype>
#include <charconv>

#include "core/error.h"
#include "placement/text_util.h"

namespace dt {

std::string to_string(const Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p)) return str_cat("S(", s->dim, ")");
  if (const auto* q = std::get_if<Partial>(&p)) return str_cat("P(", reduce_op_name(q->op), ")");
  return "R";
}

std::string to_string(const std::vector<Placement>& list) {
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i) out += ',';
    out += to_string(list[i]);
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Placement& p) { return os << to_string(p); }

Placement parse_placement(std::string_view text) {
  const std::string_view t = detail::trim(text);
  size_t i = 0;
  while (i < t.size() && std::isalpha(static_cast<unsigned char>(t[i]))) ++i;
  const std::string name = detail::lower(t.substr(0, i));
  std::string_view rest = detail::trim(t.substr(i));
  bool has_args = false;
  std::string_view args;
  if (!rest.empty()) {
    DT_CHECK_ARG(rest.front() == '(' && rest.back() == ')', "cannot parse placement '", text,
                 "': expected S(dim), R or P(op), e.g. S(0), R, P(sum)");
    has_args = true;
    args = detail::trim(rest.substr(1, rest.size() - 2));
  }
  if (name == "s" || name == "shard") {
    DT_CHECK_ARG(has_args && !args.empty(), "cannot parse placement '", text, "': Shard needs a tensor dim, e.g. S(0)");
    int64_t dim = 0;
    DT_CHECK_ARG(detail::parse_int(args, &dim), "cannot parse placement '", text, "': the Shard dim '", args,
                 "' is not an integer");
    return Shard{dim};
  }
  if (name == "r" || name == "replicate") {
    DT_CHECK_ARG(args.empty(), "cannot parse placement '", text, "': Replicate takes no argument");
    return Replicate{};
  }
  if (name == "p" || name == "partial") {
    if (args.empty()) return Partial{ReduceOp::kSum};
    try {
      return Partial{reduce_op_from_name(detail::lower(args))};
    } catch (const InvalidArgument&) {
      DT_THROW(InvalidArgument, "cannot parse placement '", text, "': unknown reduce op '", args,
               "' (expected sum, avg, max, min or product)");
    }
  }
  DT_THROW(InvalidArgument, "cannot parse placement '", text, "': expected S(dim), R or P(op), e.g. S(0), R, P(sum)");
}

std::vector<Placement> parse_placements(std::string_view text) {
  DT_CHECK_ARG(!detail::trim(text).empty(), "empty placement list: expected comma-separated placements, e.g. S(0),R");
  std::vector<Placement> out;
  for (std::string_view item : detail::split(text, ',')) out.push_back(parse_placement(item));
  return out;
}

std::vector<Placement> normalize_placements(std::vector<Placement> placements, int64_t tensor_ndim) {
  for (size_t m = 0; m < placements.size(); ++m) {
    if (auto* s = std::get_if<Shard>(&placements[m])) {
      DT_CHECK_ARG(s->dim >= -tensor_ndim && s->dim < tensor_ndim, "placement S(", s->dim, ") on mesh dim ", m,
                   " is out of range for a tensor with ", tensor_ndim, " dims (expected a dim in [", -tensor_ndim, ", ",
                   tensor_ndim, "))");
      if (s->dim < 0) s->dim += tensor_ndim;
    }
  }
  return placements;
}

size_t hash_placements(const std::vector<Placement>& placements) {
  size_t h = placements.size();
  for (const Placement& p : placements) h = hash_mix(h, std::hash<Placement>()(p));
  return h;
}

}  // namespace dt
