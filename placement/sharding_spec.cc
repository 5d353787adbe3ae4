#include "placement/sharding_spec.h"

#include <algorithm>

#include "core/error.h"
#include "core/shape.h"
#include "placement/text_util.h"

namespace dt {

namespace {

std::string order_str(const std::vector<int64_t>& v) { return shape_str(v); }

}  // namespace

ShardOrder normalize_shard_order(const ShardOrder& order, int64_t tensor_ndim) {
  ShardOrder out;
  for (const auto& [dim, mesh_dims] : order) {
    const int64_t d = dim < 0 ? dim + tensor_ndim : dim;
    DT_CHECK_ARG(d >= 0 && d < tensor_ndim, "shard order: tensor dim ", dim, " is out of range for a tensor with ",
                 tensor_ndim, " dims");
    DT_CHECK_ARG(out.count(d) == 0, "shard order: tensor dim ", d, " is listed twice (as ", dim, ")");
    out[d] = mesh_dims;
  }
  return out;
}

ShardingSpec::ShardingSpec(std::vector<Placement> placements) : placements_(std::move(placements)) {
  build_order(nullptr);
}

ShardingSpec::ShardingSpec(std::vector<Placement> placements, const ShardOrder& order)
    : placements_(std::move(placements)) {
  build_order(&order);
}

void ShardingSpec::build_order(const ShardOrder* order) {
  for (size_t m = 0; m < placements_.size(); ++m) {
    if (const auto* p = std::get_if<Partial>(&placements_[m]))
      DT_CHECK_ARG(is_valid_reduce_op(p->op), "placement Partial on mesh dim ", m, " has an invalid reduce op (value ",
                   int(p->op), ")");
    if (const auto* s = std::get_if<Shard>(&placements_[m])) {
      DT_CHECK_ARG(s->dim >= 0, "placement S(", s->dim, ") on mesh dim ", m, " of ", dt::to_string(placements_),
                   " has a negative tensor dim: normalize it against the tensor's ndim first");
      order_[s->dim].push_back(static_cast<int64_t>(m));  // ascending by construction
    }
  }
  if (order == nullptr) return;
  for (const auto& [dim, mesh_dims] : *order) {
    const auto it = order_.find(dim);
    if (it == order_.end()) {
      DT_CHECK_ARG(mesh_dims.empty(), "shard order for tensor dim ", dim, " lists mesh dims ", order_str(mesh_dims),
                   " but no mesh dim of ", dt::to_string(placements_), " shards tensor dim ", dim);
      continue;
    }
    std::vector<int64_t> sorted = mesh_dims;
    std::sort(sorted.begin(), sorted.end());
    DT_CHECK_ARG(sorted == it->second, "shard order ", order_str(mesh_dims), " for tensor dim ", dim,
                 " must list each mesh dim sharding it exactly once: ", dt::to_string(placements_),
                 " shards it on mesh dims ", order_str(it->second));
    it->second = mesh_dims;
  }
}

ShardingSpec ShardingSpec::replicated(int64_t mesh_ndim) {
  DT_CHECK_ARG(mesh_ndim >= 0, "mesh ndim must be non-negative, got ", mesh_ndim);
  return ShardingSpec(std::vector<Placement>(static_cast<size_t>(mesh_ndim), Replicate{}));
}

ShardingSpec ShardingSpec::parse(std::string_view text, std::optional<int64_t> tensor_ndim) {
  DT_CHECK_ARG(!detail::trim(text).empty(), "empty placement list: expected comma-separated placements, e.g. S(0),R");
  std::vector<Placement> placements;
  std::vector<int64_t> positions;  // -1: no suffix
  for (std::string_view raw : detail::split(text, ',')) {
    std::string_view item = detail::trim(raw);
    int64_t pos = -1;
    if (!item.empty() && item.back() == ']') {
      const size_t open = item.rfind('[');
      DT_CHECK_ARG(open != std::string_view::npos, "cannot parse '", item, "' in '", text,
                   "': unbalanced ']' (the order suffix is S(d)[k])");
      const std::string_view num = item.substr(open + 1, item.size() - open - 2);
      DT_CHECK_ARG(detail::parse_int(num, &pos) && pos >= 0, "cannot parse '", item, "' in '", text,
                   "': the shard order position '", num, "' must be a non-negative integer");
      item = item.substr(0, open);
    }
    placements.push_back(parse_placement(item));
    DT_CHECK_ARG(pos < 0 || is_shard(placements.back()), "cannot parse '", detail::trim(raw), "' in '", text,
                 "': only a Shard takes an order suffix [k]");
    positions.push_back(pos);
  }
  if (tensor_ndim) placements = normalize_placements(std::move(placements), *tensor_ndim);
  ShardOrder order;
  std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> by_dim;  // tensor dim -> (position, mesh dim)
  for (size_t m = 0; m < placements.size(); ++m) {
    if (const auto* s = std::get_if<Shard>(&placements[m])) {
      by_dim[s->dim].emplace_back(positions[m], static_cast<int64_t>(m));
    }
  }
  for (auto& [dim, entries] : by_dim) {
    const size_t with_suffix =
        static_cast<size_t>(std::count_if(entries.begin(), entries.end(), [](const auto& e) { return e.first >= 0; }));
    if (with_suffix == 0) continue;
    DT_CHECK_ARG(with_suffix == entries.size(), "in '", text, "': either every Shard of tensor dim ", dim,
                 " carries an order suffix [k] or none does");
    std::sort(entries.begin(), entries.end());
    for (size_t k = 0; k < entries.size(); ++k) {
      DT_CHECK_ARG(entries[k].first == static_cast<int64_t>(k), "in '", text, "': the order suffixes of tensor dim ",
                   dim, " must be 0..", entries.size() - 1, " each once");
      order[dim].push_back(entries[k].second);
    }
  }
  ShardingSpec spec(std::move(placements), order);
  if (tensor_ndim) spec.check_tensor_ndim(*tensor_ndim);
  return spec;
}

const Placement& ShardingSpec::placement(int64_t mesh_dim) const {
  DT_CHECK_ARG(mesh_dim >= 0 && mesh_dim < mesh_ndim(), "mesh dim ", mesh_dim, " is out of range for spec ",
               to_string(), " with ", mesh_ndim(), " mesh dims");
  return placements_[static_cast<size_t>(mesh_dim)];
}

const std::vector<int64_t>& ShardingSpec::splitters(int64_t tensor_dim) const {
  static const std::vector<int64_t> kNone;
  const auto it = order_.find(tensor_dim);
  return it == order_.end() ? kNone : it->second;
}

bool ShardingSpec::is_innermost(int64_t mesh_dim) const {
  const auto* s = std::get_if<Shard>(&placement(mesh_dim));
  return s != nullptr && splitters(s->dim).back() == mesh_dim;
}

bool ShardingSpec::has_default_order() const {
  return std::all_of(order_.begin(), order_.end(),
                     [](const auto& e) { return std::is_sorted(e.second.begin(), e.second.end()); });
}

bool ShardingSpec::is_replicated() const {
  return std::all_of(placements_.begin(), placements_.end(), [](const Placement& p) { return is_replicate(p); });
}

bool ShardingSpec::has_partial() const {
  return std::any_of(placements_.begin(), placements_.end(), [](const Placement& p) { return is_partial(p); });
}

bool ShardingSpec::has_mixed_partial() const {
  std::optional<ReduceOp> op;
  for (const Placement& p : placements_) {
    if (const auto* q = std::get_if<Partial>(&p)) {
      if (op && *op != q->op) return true;
      op = q->op;
    }
  }
  return false;
}

std::optional<ReduceOp> ShardingSpec::partial_op() const {
  if (has_mixed_partial()) {
    DT_THROW(Unsupported, "spec ", to_string(),
             " mixes Partial placements with different reduce ops, which do not commute");
  }
  for (const Placement& p : placements_) {
    if (const auto* q = std::get_if<Partial>(&p)) return q->op;
  }
  return std::nullopt;
}

int64_t ShardingSpec::min_tensor_ndim() const { return order_.empty() ? 0 : order_.rbegin()->first + 1; }

void ShardingSpec::check_tensor_ndim(int64_t tensor_ndim) const {
  if (order_.empty()) return;
  const int64_t dim = order_.rbegin()->first;
  DT_CHECK_ARG(dim < tensor_ndim, "spec ", to_string(), " shards tensor dim ", dim, " but the tensor has ", tensor_ndim,
               " dims");
}

ShardingSpec ShardingSpec::with_placement(int64_t mesh_dim, const Placement& p) const {
  placement(mesh_dim);  // range check
  if (const auto* s = std::get_if<Shard>(&p)) {
    DT_CHECK_ARG(s->dim >= 0, "with_placement: S(", s->dim, ") has a negative tensor dim");
  }
  ShardingSpec out = *this;
  if (const auto* old = std::get_if<Shard>(&placements_[static_cast<size_t>(mesh_dim)])) {
    std::vector<int64_t>& v = out.order_[old->dim];
    v.erase(std::find(v.begin(), v.end(), mesh_dim));
    if (v.empty()) out.order_.erase(old->dim);
  }
  out.placements_[static_cast<size_t>(mesh_dim)] = p;
  if (const auto* s = std::get_if<Shard>(&p)) out.order_[s->dim].push_back(mesh_dim);
  return out;
}

std::string ShardingSpec::to_string() const {
  std::string out;
  for (size_t m = 0; m < placements_.size(); ++m) {
    if (m) out += ',';
    out += dt::to_string(placements_[m]);
    if (const auto* s = std::get_if<Shard>(&placements_[m])) {
      const std::vector<int64_t>& v = splitters(s->dim);
      if (!std::is_sorted(v.begin(), v.end())) {
        out += str_cat("[", std::find(v.begin(), v.end(), static_cast<int64_t>(m)) - v.begin(), "]");
      }
    }
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const ShardingSpec& spec) { return os << spec.to_string(); }

}  // namespace dt

size_t std::hash<dt::ShardingSpec>::operator()(const dt::ShardingSpec& spec) const noexcept {
  size_t h = dt::hash_placements(spec.placements());
  for (const auto& [dim, mesh_dims] : spec.shard_order()) {
    h = dt::hash_mix(h, std::hash<int64_t>()(dim));
    for (int64_t m : mesh_dims) h = dt::hash_mix(h, std::hash<int64_t>()(m));
  }
  return h;
}
