#include "dtensor/ops/strategy.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>

#include "core/error.h"
#include "placement/planner.h"

namespace dt::ops {

// ---- OpParams ----

OpParams& OpParams::set(std::string name, ParamValue value) {
  for (auto& e : entries_) {
    if (e.first == name) {
      e.second = std::move(value);
      return *this;
    }
  }
  entries_.emplace_back(std::move(name), std::move(value));
  return *this;
}

bool OpParams::has(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == name; });
}

const ParamValue& OpParams::get(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.first == name) return e.second;
  DT_THROW(InternalError, "op parameter '", name, "' is missing (have: ", to_string(), ")");
}

bool OpParams::get_bool(const std::string& name) const {
  const ParamValue& v = get(name);
  DT_ASSERT(std::holds_alternative<bool>(v), "parameter ", name, " is not a bool");
  return std::get<bool>(v);
}

int64_t OpParams::get_int(const std::string& name) const {
  const ParamValue& v = get(name);
  DT_ASSERT(std::holds_alternative<int64_t>(v), "parameter ", name, " is not an int");
  return std::get<int64_t>(v);
}

double OpParams::get_double(const std::string& name) const {
  const ParamValue& v = get(name);
  DT_ASSERT(std::holds_alternative<double>(v), "parameter ", name, " is not a double");
  return std::get<double>(v);
}

const std::vector<int64_t>& OpParams::get_ints(const std::string& name) const {
  const ParamValue& v = get(name);
  DT_ASSERT(std::holds_alternative<std::vector<int64_t>>(v), "parameter ", name, " is not an int list");
  return std::get<std::vector<int64_t>>(v);
}

const std::string& OpParams::get_string(const std::string& name) const {
  const ParamValue& v = get(name);
  DT_ASSERT(std::holds_alternative<std::string>(v), "parameter ", name, " is not a string");
  return std::get<std::string>(v);
}

std::string OpParams::to_string() const {
  std::string out;
  for (const auto& [name, value] : entries_) {
    if (!out.empty()) out += ", ";
    out += name + "=";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            out += v ? "true" : "false";
          } else if constexpr (std::is_same_v<V, int64_t>) {
            out += std::to_string(v);
          } else if constexpr (std::is_same_v<V, double>) {
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%.17g", v);
            out += buf;
          } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
            out += shape_str(v);
          } else {
            out += v;
          }
        },
        value);
  }
  return out;
}

size_t OpParams::hash() const {
  size_t h = entries_.size();
  for (const auto& [name, value] : entries_) {
    h = hash_mix(h, std::hash<std::string>()(name));
    h = hash_mix(h, value.index());
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
            for (int64_t x : v) h = hash_mix(h, std::hash<int64_t>()(x));
          } else {
            h = hash_mix(h, std::hash<V>()(v));
          }
        },
        value);
  }
  return h;
}

// ---- OpSchema ----

size_t OpSchema::hash() const {
  size_t h = hash_mix(std::hash<uint32_t>()(static_cast<uint32_t>(id)), std::hash<MeshShape>()(mesh));
  h = hash_mix(h, params.hash());
  for (const TensorMeta& t : inputs) {
    h = hash_mix(h, t.defined);
    if (!t.defined) continue;
    for (int64_t s : t.shape) h = hash_mix(h, std::hash<int64_t>()(s));
    h = hash_mix(h, static_cast<size_t>(t.dtype));
    h = hash_mix(h, std::hash<ShardingSpec>()(t.spec));
  }
  return h;
}

bool OpSchema::same_key(const OpSchema& other) const {
  return id == other.id && inputs == other.inputs && mesh == other.mesh && params == other.params;
}

std::string OpSchema::describe_inputs(const std::vector<std::string>& names) const {
  std::string out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorMeta& t = inputs[i];
    if (!t.defined) continue;
    if (!out.empty()) out += "; ";
    out += (i < names.size() ? names[i] : "input " + std::to_string(i)) + ": " + shape_str(t.shape) + " " +
           dtype_name(t.dtype) + " " + t.spec.to_string();
  }
  return out;
}

// ---- strategies ----

std::string DimStrategy::to_string() const {
  std::string out;
  for (size_t i = 0; i < inputs.size(); ++i) out += (i ? ", " : "") + dt::to_string(inputs[i]);
  out += " -> ";
  for (size_t i = 0; i < outputs.size(); ++i) out += (i ? ", " : "") + dt::to_string(outputs[i]);
  return out;
}

std::string OpStrategy::to_string() const {
  std::string out;
  for (size_t i = 0; i < inputs.size(); ++i) out += (i ? " x " : "") + inputs[i].to_string();
  out += " -> ";
  for (size_t i = 0; i < outputs.size(); ++i) out += (i ? ", " : "") + outputs[i].to_string();
  return out;
}

bool is_usable_spec(const ShardingSpec& spec) { return !spec.has_mixed_partial(); }

namespace {

// The mesh-dim orders to try (Note [single-dim strategies]); the ascending one first.
std::vector<std::vector<int64_t>> candidate_orders(const OpSchema& schema) {
  const int64_t m = schema.mesh.ndim();
  std::vector<int64_t> ident(static_cast<size_t>(m));
  std::iota(ident.begin(), ident.end(), 0);
  std::vector<std::vector<int64_t>> out;
  if (m <= 3) {
    std::vector<int64_t> p = ident;
    do out.push_back(p);
    while (std::next_permutation(p.begin(), p.end()));
    return out;
  }
  out.push_back(ident);
  for (const TensorMeta& t : schema.inputs) {
    if (!t.defined || t.spec.has_default_order()) continue;
    std::vector<int64_t> p;
    for (const auto& [dim, splitters] : t.spec.shard_order()) p.insert(p.end(), splitters.begin(), splitters.end());
    for (int64_t d : ident)
      if (std::find(p.begin(), p.end(), d) == p.end()) p.push_back(d);
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// Builds an operand's spec from per-mesh-dim placements with splitters ordered by `pos` (position of each mesh dim
// in the order). Returns nullopt when a Shard dim does not fit the operand's ndim. Sets *nested when some tensor
// dim has several splitters.
std::optional<ShardingSpec> build_spec(std::vector<Placement> placements, int64_t ndim, const std::vector<int64_t>& pos,
                                       bool* nested) {
  ShardOrder order;
  for (size_t m = 0; m < placements.size(); ++m) {
    if (const auto* s = std::get_if<Shard>(&placements[m])) {
      if (s->dim < 0 || s->dim >= ndim) return std::nullopt;
      order[s->dim].push_back(int64_t(m));
    }
  }
  for (auto& [dim, mesh_dims] : order) {
    if (mesh_dims.size() < 2) continue;
    *nested = true;
    std::sort(mesh_dims.begin(), mesh_dims.end(),
              [&](int64_t a, int64_t b) { return pos[size_t(a)] < pos[size_t(b)]; });
  }
  return ShardingSpec(std::move(placements), order);
}

}  // namespace

std::vector<OpStrategy> expand_strategies(const OpSchema& schema, const std::vector<OutputMeta>& outputs,
                                          const std::vector<DimStrategy>& dim_strategies) {
  const int64_t mesh_ndim = schema.mesh.ndim();
  const size_t n_in = schema.inputs.size(), n_out = outputs.size();
  for (const DimStrategy& s : dim_strategies) {
    DT_ASSERT(s.inputs.size() == n_in && s.outputs.size() == n_out, "rule for ", schema.op, " gave strategy ",
              s.to_string(), " for ", n_in, " inputs and ", n_out, " outputs");
  }
  std::vector<OpStrategy> out;
  if (dim_strategies.empty()) return out;
  const std::vector<std::vector<int64_t>> orders = candidate_orders(schema);
  std::set<std::string> seen;
  std::vector<size_t> idx(size_t(mesh_ndim), 0);
  while (true) {
    for (size_t oi = 0; oi < orders.size(); ++oi) {
      std::vector<int64_t> pos(static_cast<size_t>(mesh_ndim));
      for (size_t k = 0; k < orders[oi].size(); ++k) pos[size_t(orders[oi][k])] = int64_t(k);
      bool nested = false, fits = true;
      OpStrategy cand;
      auto operand = [&](bool is_input, size_t i, int64_t ndim) {
        std::vector<Placement> pl;
        for (int64_t m = 0; m < mesh_ndim; ++m) {
          const DimStrategy& s = dim_strategies[idx[size_t(m)]];
          pl.push_back(is_input ? s.inputs[i] : s.outputs[i]);
        }
        std::optional<ShardingSpec> spec = build_spec(std::move(pl), ndim, pos, &nested);
        if (!spec) {
          fits = false;
          return ShardingSpec::replicated(mesh_ndim);
        }
        return *spec;
      };
      for (size_t i = 0; i < n_in && fits; ++i) {
        const TensorMeta& t = schema.inputs[i];
        // Absent inputs are carried as Replicate whatever the strategy says.
        cand.inputs.push_back(t.defined ? operand(true, i, t.ndim()) : ShardingSpec::replicated(mesh_ndim));
      }
      for (size_t i = 0; i < n_out && fits; ++i)
        cand.outputs.push_back(operand(false, i, int64_t(outputs[i].shape.size())));
      if (!fits) break;              // the same for every order
      if (oi > 0 && !nested) break;  // orders only matter for nested sharding
      std::string key = cand.to_string();
      if (seen.insert(key).second) out.push_back(std::move(cand));
    }
    // Next combination, mesh dim 0 slowest.
    int64_t m = mesh_ndim - 1;
    while (m >= 0 && ++idx[size_t(m)] == dim_strategies.size()) idx[size_t(m--)] = 0;
    if (m < 0) break;
  }
  return out;
}

std::optional<double> redistribute_cost(const OpSchema& schema, const OpStrategy& candidate, const CostModel& model) {
  double total = 0;
  for (size_t i = 0; i < schema.inputs.size(); ++i) {
    const TensorMeta& t = schema.inputs[i];
    if (!t.defined) continue;
    const ShardingSpec& cur = t.spec;
    const ShardingSpec& req = candidate.inputs[i];
    if (cur == req) continue;
    if (!is_usable_spec(req) || !is_usable_spec(cur)) return std::nullopt;
    for (int64_t m = 0; m < cur.mesh_ndim(); ++m)
      if (is_shard(cur[m]) && is_partial(req[m])) return std::nullopt;
    try {
      total += plan_redistribution(schema.mesh, t.shape, dtype_size(t.dtype), cur, req, model).cost;
    } catch (const Unsupported&) {
      return std::nullopt;
    }
  }
  return total;
}

}  // namespace dt::ops
