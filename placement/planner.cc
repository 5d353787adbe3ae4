#include "placement/planner.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "placement/layout.h"

namespace dt {

namespace {

std::string fmt_double(double v, int digits = 6) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}
constexpr int kJsonDigits = 12;

// Note [transition table]
// The one statement of which 1-d transitions exist (Note [step semantics] in planner.h), by placement kind. Both the
// search (on compact codes) and classify_step (on placements) read it; what the table cannot see is checked beside
// it: a placement that does not change, a Shard that is not innermost, and mixed Partial ops.
enum class PlacementKind : uint8_t { kReplicate, kPartial, kShard };

struct TransitionRule {
  bool legal;
  StepKind kind;    // when legal
  const char* why;  // when not
};

// kTransitionTable[from][to]; same-kind entries apply when the placements differ (another op, another dim).
constexpr TransitionRule kTransitionTable[3][3] = {
    // to: Replicate                      Partial                              Shard
    {{false, StepKind::kAllGather, "the placement does not change"},  // from Replicate
     {true, StepKind::kLocalPartial, nullptr},
     {true, StepKind::kLocalSlice, nullptr}},
    {{true, StepKind::kAllReduce, nullptr},  // from Partial
     {false, StepKind::kAllGather, "Partial -> Partial with another op is not one step (it goes through Replicate)"},
     {true, StepKind::kReduceScatter, nullptr}},
    {{true, StepKind::kAllGather, nullptr},  // from Shard
     {false, StepKind::kAllGather, "Shard -> Partial is not supported"},
     {true, StepKind::kAllToAll, nullptr}},
};

PlacementKind kind_of(const Placement& p) {
  return is_shard(p) ? PlacementKind::kShard : is_partial(p) ? PlacementKind::kPartial : PlacementKind::kReplicate;
}

const TransitionRule& transition_rule(PlacementKind from, PlacementKind to) {
  return kTransitionTable[static_cast<size_t>(from)][static_cast<size_t>(to)];
}

// Which single step takes mesh dim m of `before` to `to` (Note [step semantics]); nullopt with the reason otherwise.
std::optional<StepKind> classify_step(const ShardingSpec& before, int64_t m, const Placement& to, std::string* why) {
  const Placement& from = before.placement(m);
  if (from == to) {
    *why = "the placement does not change";
    return std::nullopt;
  }
  const TransitionRule& rule = transition_rule(kind_of(from), kind_of(to));
  if (!rule.legal) {
    *why = rule.why;
    return std::nullopt;
  }
  if (const auto* s = std::get_if<Shard>(&from); s != nullptr && !before.is_innermost(m)) {
    *why = str_cat("mesh dim ", m, " is not the innermost splitter of tensor dim ", s->dim, " (order ",
                   shape_str(before.splitters(s->dim)), "): undo the inner splitters first");
    return std::nullopt;
  }
  return rule.kind;
}

struct StepPrice {
  int64_t bytes_moved = 0;
  int64_t bytes_copied = 0;
  double cost = 0;
};

// Prices a step from the local shapes at coordinate 0 before and after it (the largest blocks at every level,
// layout.h). The search and make_step both call this, so their costs agree to the bit.
StepPrice price_step(StepKind kind, int64_t n, const Shape& in_shape, const Shape& out_shape, int64_t to_tensor_dim,
                     ReduceOp partial_op, size_t elem_size, const CostModel& model) {
  StepPrice p;
  const auto es = static_cast<int64_t>(elem_size);
  const int64_t in_numel = shape_numel(in_shape);
  const int64_t out_numel = shape_numel(out_shape);
  switch (kind) {
    case StepKind::kAllGather:
      p.bytes_moved = (n - 1) * in_numel * es;
      break;
    case StepKind::kReduceScatter:
      p.bytes_moved = (n - 1) * out_numel * es;
      break;
    case StepKind::kAllReduce:
      p.bytes_moved = 2 * (n - 1) * ceil_div(in_numel, n) * es;
      break;
    case StepKind::kAllToAll: {
      // One block: the input sliced by n along the new shard dim (padded to the first, largest chunk).
      Shape block = in_shape;
      const auto j = static_cast<size_t>(to_tensor_dim);
      block[j] = out_shape[j];
      p.bytes_moved = (n - 1) * shape_numel(block) * es;
      break;
    }
    case StepKind::kLocalSlice:
      p.bytes_copied = out_numel * es;
      break;
    case StepKind::kLocalPartial:
      // sum and product overwrite the non-zero coordinates; avg, max and min keep the value everywhere.
      if (n > 1 && (partial_op == ReduceOp::kSum || partial_op == ReduceOp::kProduct)) p.bytes_copied = in_numel * es;
      break;
  }
  p.cost = model.cost(kind, n, p.bytes_moved, p.bytes_copied);
  return p;
}

PlanStep build_step(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& before, int64_t m,
                    const Placement& to, StepKind kind, ShardingSpec after, const CostModel& model) {
  PlanStep step;
  step.mesh_dim = m;
  step.kind = kind;
  step.from = before.placement(m);
  step.to = to;
  if (const auto* s = std::get_if<Shard>(&step.from)) step.from_tensor_dim = s->dim;
  if (const auto* s = std::get_if<Shard>(&to)) step.to_tensor_dim = s->dim;
  step.group_size = mesh.sizes()[static_cast<size_t>(m)];
  const ReduceOp op = is_partial(to) ? std::get<Partial>(to).op : ReduceOp::kSum;
  const StepPrice p = price_step(kind, step.group_size, max_local_shape(global, mesh, before),
                                 max_local_shape(global, mesh, after), step.to_tensor_dim, op, elem_size, model);
  step.bytes_moved = p.bytes_moved;
  step.bytes_copied = p.bytes_copied;
  step.cost = p.cost;
  step.before = before;
  step.after = std::move(after);
  return step;
}

// Note [compact planner states]
// The search visits many specs, so it runs on a compact encoding: two bytes per mesh dim, the placement code (0: R,
// 1 + op: P(op), kShardCode + d: S(d)) and the mesh dim's position in its tensor dim's shard order (0 when not a
// Shard). Updates mirror ShardingSpec::with_placement; the chosen path is replayed on ShardingSpec at the end.
constexpr int kShardCode = 16;
constexpr int64_t kMaxPlannedTensorDims = 255 - kShardCode;

uint8_t code_of(const Placement& p) {
  if (const auto* s = std::get_if<Shard>(&p)) return static_cast<uint8_t>(kShardCode + s->dim);
  if (const auto* q = std::get_if<Partial>(&p)) return static_cast<uint8_t>(1 + static_cast<int>(q->op));
  return 0;
}

Placement placement_of(uint8_t code) {
  if (code >= kShardCode) return Shard{code - kShardCode};
  if (code > 0) return Partial{static_cast<ReduceOp>(code - 1)};
  return Replicate{};
}

std::string encode(const ShardingSpec& spec) {
  std::string s(static_cast<size_t>(2 * spec.mesh_ndim()), '\0');
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m) {
    s[static_cast<size_t>(2 * m)] = static_cast<char>(code_of(spec[m]));
    if (const auto* sh = std::get_if<Shard>(&spec[m])) {
      const std::vector<int64_t>& v = spec.splitters(sh->dim);
      s[static_cast<size_t>(2 * m + 1)] = static_cast<char>(std::find(v.begin(), v.end(), m) - v.begin());
    }
  }
  return s;
}

inline uint8_t code_at(const std::string& s, size_t m) { return static_cast<uint8_t>(s[2 * m]); }
inline uint8_t pos_at(const std::string& s, size_t m) { return static_cast<uint8_t>(s[2 * m + 1]); }

// Local shape at coordinate 0: ceil(ceil(n / a) / b) == ceil(n / (a * b)), so the shard order does not matter here.
Shape coord0_shape(const std::string& s, const Shape& global, const std::vector<int64_t>& mesh_sizes) {
  Shape out = global;
  for (size_t m = 0; m < mesh_sizes.size(); ++m) {
    const uint8_t c = code_at(s, m);
    if (c >= kShardCode) out[c - kShardCode] = ceil_div(out[c - kShardCode], mesh_sizes[m]);
  }
  return out;
}

void check_plan_args(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                     const ShardingSpec& dst) {
  DT_CHECK_ARG(elem_size > 0, "element size must be positive, got ", elem_size);
  int64_t bytes = 0;
  DT_CHECK_ARG(!__builtin_mul_overflow(shape_numel(global), static_cast<int64_t>(elem_size), &bytes),
               "a tensor of shape ", shape_str(global), " with ", elem_size,
               "-byte elements has more bytes than an int64 can count");
  check_layout_args(global, mesh, src);
  check_layout_args(global, mesh, dst);
}

[[noreturn]] void throw_unsupported(const MeshShape& mesh, const ShardingSpec& src, const ShardingSpec& dst,
                                    const std::string& why) {
  DT_THROW(Unsupported, "cannot redistribute from ", src, " to ", dst, " on ", mesh, ": ", why);
}

}  // namespace

std::string PlanStep::to_string() const {
  std::string out = str_cat("mesh dim ", mesh_dim, ": ", step_kind_name(kind), " ", dt::to_string(from), " -> ",
                            dt::to_string(to), " (group ", group_size, ", ", bytes_moved, " B/rank");
  if (bytes_copied) out += str_cat(", ", bytes_copied, " B copied");
  return out + str_cat(", cost ", fmt_double(cost), " s) [", before, " -> ", after, "]");
}

std::string PlanStep::to_json() const {
  return str_cat("{\"mesh_dim\":", mesh_dim, ",\"kind\":\"", step_kind_name(kind), "\",\"from\":\"",
                 dt::to_string(from), "\",\"to\":\"", dt::to_string(to), "\",\"from_tensor_dim\":", from_tensor_dim,
                 ",\"to_tensor_dim\":", to_tensor_dim, ",\"group_size\":", group_size, ",\"bytes_moved\":", bytes_moved,
                 ",\"bytes_copied\":", bytes_copied, ",\"cost\":", fmt_double(cost, kJsonDigits), ",\"before\":\"",
                 before, "\",\"after\":\"", after, "\"}");
}

int64_t Plan::bytes_moved() const {
  int64_t total = 0;
  for (const PlanStep& s : steps) total += s.bytes_moved;
  return total;
}

std::string Plan::to_string() const {
  std::string out = str_cat("plan ", src, " -> ", dst, ": ", steps.size(), " step", steps.size() == 1 ? "" : "s", ", ",
                            bytes_moved(), " B/rank, cost ", fmt_double(cost), " s");
  for (size_t i = 0; i < steps.size(); ++i) out += str_cat("\n  ", i + 1, ". ", steps[i].to_string());
  return out;
}

std::string Plan::to_json() const {
  std::string out = str_cat("{\"from\":\"", src, "\",\"to\":\"", dst, "\",\"cost\":", fmt_double(cost, kJsonDigits),
                            ",\"bytes_moved\":", bytes_moved(), ",\"steps\":[");
  for (size_t i = 0; i < steps.size(); ++i) out += (i ? "," : "") + steps[i].to_json();
  return out + "]}";
}

PlanStep make_step(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& before,
                   int64_t mesh_dim, const Placement& to, const CostModel& model) {
  DT_CHECK_ARG(elem_size > 0, "element size must be positive, got ", elem_size);
  check_layout_args(global, mesh, before);
  DT_CHECK_ARG(mesh_dim >= 0 && mesh_dim < mesh.ndim(), "mesh dim ", mesh_dim, " is out of range for mesh ", mesh);
  if (const auto* s = std::get_if<Shard>(&to)) {
    DT_CHECK_ARG(s->dim >= 0 && s->dim < static_cast<int64_t>(global.size()), "target placement ", to,
                 " is out of range for a tensor with ", global.size(), " dims");
  }
  std::string why;
  const std::optional<StepKind> kind = classify_step(before, mesh_dim, to, &why);
  if (!kind) {
    DT_THROW(Unsupported, "no single step takes mesh dim ", mesh_dim, " of ", before, " to ", to, ": ", why);
  }
  ShardingSpec after = before.with_placement(mesh_dim, to);
  if (after.has_mixed_partial()) {
    DT_THROW(Unsupported, "step on mesh dim ", mesh_dim, " from ", before, " to ", after,
             " would mix Partial placements with different reduce ops");
  }
  return build_step(mesh, global, elem_size, before, mesh_dim, to, *kind, std::move(after), model);
}

namespace {

// Phase 1: the inputs are valid and the pair is one the planner supports (throws otherwise).
void check_plannable(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                     const ShardingSpec& dst) {
  check_plan_args(mesh, global, elem_size, src, dst);
  if (src.has_mixed_partial()) {
    throw_unsupported(mesh, src, dst,
                      "the source mixes Partial placements with different reduce ops, which do not commute");
  }
  if (dst.has_mixed_partial()) {
    throw_unsupported(mesh, src, dst,
                      "the target mixes Partial placements with different reduce ops, which do not commute");
  }
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    if (is_shard(src[m]) && is_partial(dst[m])) {
      throw_unsupported(mesh, src, dst,
                        str_cat("mesh dim ", m, " goes from ", src[m], " to ", dst[m],
                                ", and Shard -> Partial is not supported (redistribute to Replicate first)"));
    }
  }
}

// Phase 2: the codes a mesh dim may take: every Shard, R, and Partial only with the ops of the source and target
// (no other op can help, and mixed states are never entered).
std::vector<uint8_t> candidate_codes(const Shape& global, const ShardingSpec& src, const ShardingSpec& dst) {
  std::vector<uint8_t> candidates;
  for (int64_t d = 0; d < static_cast<int64_t>(global.size()); ++d) candidates.push_back(code_of(Shard{d}));
  candidates.push_back(code_of(Replicate{}));
  for (const ShardingSpec* spec : {&src, &dst}) {
    if (const std::optional<ReduceOp> op = spec->partial_op()) {
      const uint8_t c = code_of(Partial{*op});
      if (std::find(candidates.begin(), candidates.end(), c) == candidates.end()) candidates.push_back(c);
    }
  }
  return candidates;
}

PlacementKind kind_of_code(uint8_t code) {
  return code >= kShardCode ? PlacementKind::kShard : code > 0 ? PlacementKind::kPartial : PlacementKind::kReplicate;
}

// One move of the search: mesh dim m of state `cur` goes to code `to`. Returns false when the move is not a legal
// step (Note [transition table]) or enters a mixed-Partial state; otherwise writes the step kind and the next state
// (mirroring ShardingSpec::with_placement on the compact encoding).
bool next_state(const std::string& cur, size_t m, uint8_t to, size_t k, StepKind* kind, std::string* next) {
  const uint8_t from = code_at(cur, m);
  if (to == from) return false;
  const bool from_shard = from >= kShardCode;
  if (from_shard) {
    // Only the innermost splitter of a tensor dim may move (all_gather, all_to_all).
    size_t splitters = 0;
    for (size_t o = 0; o < k; ++o) splitters += code_at(cur, o) == from;
    if (pos_at(cur, m) + 1u != splitters) return false;
  }
  const TransitionRule& rule = transition_rule(kind_of_code(from), kind_of_code(to));
  if (!rule.legal) return false;
  *kind = rule.kind;
  const bool to_shard = to >= kShardCode;
  const bool to_partial = to > 0 && !to_shard;
  *next = cur;
  if (from_shard) {
    for (size_t o = 0; o < k; ++o) {
      if (o != m && code_at(cur, o) == from && pos_at(cur, o) > pos_at(cur, m)) --(*next)[2 * o + 1];
    }
  }
  (*next)[2 * m] = static_cast<char>(to);
  (*next)[2 * m + 1] = 0;
  for (size_t o = 0; o < k; ++o) {
    if (o == m) continue;
    const uint8_t c = code_at(*next, o);
    if (to_shard && c == to) ++(*next)[2 * m + 1];                       // a new splitter is the innermost
    if (to_partial && c > 0 && c < kShardCode && c != to) return false;  // mixed Partial ops
  }
  return true;
}

// The cheapest path found by the search, as (mesh dim, target code) moves, and its cost.
struct SearchResult {
  std::vector<std::pair<int64_t, uint8_t>> path;
  double cost = 0;
};

// Phase 3: uniform-cost search (Dijkstra) over compact states; ties broken by insertion order so plans are
// deterministic.
SearchResult search_cheapest(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                             const ShardingSpec& dst, const std::vector<uint8_t>& candidates, const CostModel& model) {
  const std::vector<int64_t>& sizes = mesh.sizes();
  const size_t k = sizes.size();
  struct Node {
    std::string state;
    double dist;
    int64_t prev;           // previous node, -1 for the source
    int64_t mesh_dim = -1;  // the step from prev
    uint8_t to = 0;
    bool done = false;
  };
  std::vector<Node> nodes;
  std::unordered_map<std::string, int64_t> index;
  using Entry = std::tuple<double, int64_t, int64_t>;  // (dist, sequence, node)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  int64_t seq = 0;
  const std::string target_state = encode(dst);
  nodes.push_back(Node{encode(src), 0.0, -1});
  index.emplace(nodes[0].state, 0);
  queue.emplace(0.0, seq++, 0);
  int64_t target = -1;
  std::string next;
  while (!queue.empty()) {
    const auto [dist, unused_seq, u] = queue.top();
    (void)unused_seq;
    queue.pop();
    if (nodes[static_cast<size_t>(u)].done) continue;
    nodes[static_cast<size_t>(u)].done = true;
    const std::string cur = nodes[static_cast<size_t>(u)].state;
    if (cur == target_state) {
      target = u;
      break;
    }
    const Shape in_shape = coord0_shape(cur, global, sizes);
    for (size_t m = 0; m < k; ++m) {
      for (const uint8_t to : candidates) {
        StepKind kind;
        if (!next_state(cur, m, to, k, &kind, &next)) continue;
        const auto it = index.find(next);
        if (it != index.end() && nodes[static_cast<size_t>(it->second)].done) continue;
        const bool to_shard = to >= kShardCode;
        const int64_t to_dim = to_shard ? to - kShardCode : -1;
        const ReduceOp op = to > 0 && !to_shard ? static_cast<ReduceOp>(to - 1) : ReduceOp::kSum;
        const double nd =
            dist +
            price_step(kind, sizes[m], in_shape, coord0_shape(next, global, sizes), to_dim, op, elem_size, model).cost;
        if (it == index.end()) {
          const auto v = static_cast<int64_t>(nodes.size());
          index.emplace(next, v);
          nodes.push_back(Node{next, nd, u, static_cast<int64_t>(m), to});
          queue.emplace(nd, seq++, v);
        } else if (nd < nodes[static_cast<size_t>(it->second)].dist) {
          Node& node = nodes[static_cast<size_t>(it->second)];
          node.dist = nd;
          node.prev = u;
          node.mesh_dim = static_cast<int64_t>(m);
          node.to = to;
          queue.emplace(nd, seq++, it->second);
        }
      }
    }
  }
  DT_ASSERT(target >= 0, "no plan found from ", src, " to ", dst, " on ", mesh);
  SearchResult result;
  result.cost = nodes[static_cast<size_t>(target)].dist;
  for (int64_t v = target; nodes[static_cast<size_t>(v)].prev >= 0; v = nodes[static_cast<size_t>(v)].prev) {
    result.path.emplace_back(nodes[static_cast<size_t>(v)].mesh_dim, nodes[static_cast<size_t>(v)].to);
  }
  std::reverse(result.path.begin(), result.path.end());
  return result;
}

// Phase 4: replays the path on ShardingSpec, so the steps carry full specs and are priced by the same function.
void replay_path(const MeshShape& mesh, const Shape& global, size_t elem_size, const SearchResult& found,
                 const CostModel& model, Plan* plan) {
  ShardingSpec cur = plan->src;
  for (const auto& [m, code] : found.path) {
    const Placement to = placement_of(code);
    std::string why;
    const std::optional<StepKind> kind = classify_step(cur, m, to, &why);
    DT_ASSERT(kind.has_value(), "planned step on mesh dim ", m, " from ", cur, " to ", to, ": ", why);
    ShardingSpec after = cur.with_placement(m, to);
    plan->steps.push_back(build_step(mesh, global, elem_size, cur, m, to, *kind, after, model));
    plan->cost += plan->steps.back().cost;
    cur = std::move(after);
  }
  DT_ASSERT(cur == plan->dst, "planned path ends at ", cur, " instead of ", plan->dst);
  DT_ASSERT(plan->cost == found.cost, "plan cost ", plan->cost, " differs from the search's ", found.cost);
}

}  // namespace

Plan plan_redistribution_uncached(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                                  const ShardingSpec& dst, const CostModel& model) {
  check_plannable(mesh, global, elem_size, src, dst);
  Plan plan;
  plan.src = src;
  plan.dst = dst;
  if (src == dst) return plan;
  DT_CHECK_ARG(static_cast<int64_t>(global.size()) <= kMaxPlannedTensorDims, "the planner handles tensors of up to ",
               kMaxPlannedTensorDims, " dims, got ", global.size());
  const SearchResult found =
      search_cheapest(mesh, global, elem_size, src, dst, candidate_codes(global, src, dst), model);
  replay_path(mesh, global, elem_size, found, model, &plan);
  return plan;
}

namespace {

struct PlanKey {
  std::vector<int64_t> mesh_sizes;
  Shape global;
  size_t elem_size;
  ShardingSpec src;
  ShardingSpec dst;
  CostModel model;
};

// The arguments of a lookup, by reference: a warm lookup allocates nothing (heterogeneous lookup, C++20).
struct PlanKeyRef {
  const std::vector<int64_t>& mesh_sizes;
  const Shape& global;
  size_t elem_size;
  const ShardingSpec& src;
  const ShardingSpec& dst;
  const CostModel& model;
};

PlanKeyRef as_ref(const PlanKey& k) { return PlanKeyRef{k.mesh_sizes, k.global, k.elem_size, k.src, k.dst, k.model}; }
PlanKeyRef as_ref(const PlanKeyRef& k) { return k; }

struct PlanKeyHash {
  using is_transparent = void;
  template <typename K>
  size_t operator()(const K& key) const noexcept {
    const PlanKeyRef k = as_ref(key);
    size_t h = std::hash<ShardingSpec>()(k.src);
    h = hash_mix(h, std::hash<ShardingSpec>()(k.dst));
    for (int64_t s : k.mesh_sizes) h = hash_mix(h, std::hash<int64_t>()(s));
    h = hash_mix(h, 0x5e);
    for (int64_t s : k.global) h = hash_mix(h, std::hash<int64_t>()(s));
    h = hash_mix(h, k.elem_size);
    for (double c : {k.model.alpha, k.model.beta, k.model.launch, k.model.copy_beta}) {
      h = hash_mix(h, std::hash<double>()(c));
    }
    return h;
  }
};

struct PlanKeyEq {
  using is_transparent = void;
  template <typename A, typename B>
  bool operator()(const A& a_key, const B& b_key) const {
    const PlanKeyRef a = as_ref(a_key);
    const PlanKeyRef b = as_ref(b_key);
    return a.elem_size == b.elem_size && a.mesh_sizes == b.mesh_sizes && a.global == b.global && a.src == b.src &&
           a.dst == b.dst && a.model == b.model;
  }
};

struct PlanCache {
  std::mutex mu;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash, PlanKeyEq> plans;
  int64_t hits = 0;
  int64_t misses = 0;
};

PlanCache& plan_cache() {
  static PlanCache* cache = new PlanCache();  // never destroyed: plans may be used during static destruction
  return *cache;
}

}  // namespace

const Plan& plan_redistribution(const MeshShape& mesh, const Shape& global, size_t elem_size, const ShardingSpec& src,
                                const ShardingSpec& dst, const CostModel& model) {
  const PlanKeyRef key{mesh.sizes(), global, elem_size, src, dst, model};
  PlanCache& cache = plan_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    const auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      ++cache.hits;
      return *it->second;
    }
  }
  // Plan outside the lock (a search can take a while on large meshes); errors are not cached.
  auto plan = std::make_unique<Plan>(plan_redistribution_uncached(mesh, global, elem_size, src, dst, model));
  std::lock_guard<std::mutex> lock(cache.mu);
  ++cache.misses;
  // Another thread may have inserted the same plan meanwhile: keep the first (references to it may exist).
  const auto it = cache.plans.find(key);
  if (it != cache.plans.end()) return *it->second;
  return *cache.plans.emplace(PlanKey{mesh.sizes(), global, elem_size, src, dst, model}, std::move(plan)).first->second;
}

PlanCacheStats plan_cache_stats() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  return PlanCacheStats{cache.hits, cache.misses, static_cast<int64_t>(cache.plans.size())};
}

void clear_plan_cache() {
  PlanCache& cache = plan_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.plans.clear();
  cache.hits = 0;
  cache.misses = 0;
}

}  // namespace dt
