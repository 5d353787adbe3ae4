// The redistribution planner, checked by simulation: a virtual mesh holds every rank's local tensor in one process
// and runs a plan's steps by their data semantics (Note [step semantics] in planner.h). For thousands of random
// cases the result must equal the target layout of the same global tensor, bit for bit (integer-valued data, so
// every reduction is exact), and on small cases the plan must be no costlier than any step sequence of length <= 5
// that reaches the target.
#include "placement/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>

#include "core/error.h"
#include "placement/layout.h"

namespace dt {
namespace {

const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct};

// A dense row-major array of doubles.
struct Array {
  Shape shape;
  std::vector<double> data;
  bool operator==(const Array&) const = default;
};

Array make_array(const Shape& shape, double fill = 0) {
  return Array{shape, std::vector<double>(static_cast<size_t>(shape_numel(shape)), fill)};
}

// Visits every multi-index of `shape` in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Shape&)>& fn) {
  if (shape_numel(shape) == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    fn(idx);
    size_t d = shape.size();
    while (d > 0 && ++idx[d - 1] == shape[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

int64_t flat_index(const Shape& shape, const Shape& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

// The box [offset, offset + shape) of a.
Array box(const Array& a, const Shape& offset, const Shape& shape) {
  Array out = make_array(shape);
  for_each_index(shape, [&](const Shape& idx) {
    Shape src = idx;
    for (size_t d = 0; d < idx.size(); ++d) src[d] += offset[d];
    out.data[static_cast<size_t>(flat_index(shape, idx))] = a.data[static_cast<size_t>(flat_index(a.shape, src))];
  });
  return out;
}

// torch.chunk along one dim, from its definition (independent of the library): chunk i of k over n elements.
std::pair<int64_t, int64_t> ref_chunk(int64_t n, int64_t k, int64_t i) {
  const int64_t split = n == 0 ? 0 : (n + k - 1) / k;
  int64_t start = 0;
  for (int64_t c = 0; c < i && start < n; ++c) start += split;
  if (start >= n) return {n, 0};
  return {start, std::min(split, n - start)};
}

Array narrow_chunk(const Array& a, int64_t dim, int64_t k, int64_t i) {
  const auto [off, len] = ref_chunk(a.shape[static_cast<size_t>(dim)], k, i);
  Shape offset(a.shape.size(), 0);
  Shape shape = a.shape;
  offset[static_cast<size_t>(dim)] = off;
  shape[static_cast<size_t>(dim)] = len;
  return box(a, offset, shape);
}

Array cat(const std::vector<Array>& parts, int64_t dim) {
  Shape shape = parts.front().shape;
  shape[static_cast<size_t>(dim)] = 0;
  for (const Array& p : parts) {
    for (size_t d = 0; d < shape.size(); ++d) {
      if (static_cast<int64_t>(d) != dim) {
        EXPECT_EQ(p.shape[d], shape[d]) << "cat: mismatched shapes";
      }
    }
    shape[static_cast<size_t>(dim)] += p.shape[static_cast<size_t>(dim)];
  }
  Array out = make_array(shape);
  int64_t base = 0;
  for (const Array& p : parts) {
    for_each_index(p.shape, [&](const Shape& idx) {
      Shape dst = idx;
      dst[static_cast<size_t>(dim)] += base;
      out.data[static_cast<size_t>(flat_index(shape, dst))] = p.data[static_cast<size_t>(flat_index(p.shape, idx))];
    });
    base += p.shape[static_cast<size_t>(dim)];
  }
  return out;
}

Array reduce(const std::vector<Array>& parts, ReduceOp op) {
  Array out = parts.front();
  for (size_t i = 1; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].shape, out.shape) << "reduce: mismatched shapes";
    for (size_t e = 0; e < out.data.size(); ++e) {
      const double v = parts[i].data[e];
      double& o = out.data[e];
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          o += v;
          break;
        case ReduceOp::kMax:
          o = std::max(o, v);
          break;
        case ReduceOp::kMin:
          o = std::min(o, v);
          break;
        case ReduceOp::kProduct:
          o *= v;
          break;
      }
    }
  }
  if (op == ReduceOp::kAvg) {
    for (double& o : out.data) o /= static_cast<double>(parts.size());
  }
  return out;
}

// Every rank's local tensor, indexed by linear mesh index.
struct VirtualMesh {
  MeshShape mesh;
  std::vector<Array> local;

  // The 1-d groups along m: linear indices of the members, in coordinate order.
  std::vector<std::vector<int64_t>> groups(int64_t m) const {
    std::vector<std::vector<int64_t>> out;
    for (int64_t i = 0; i < mesh.numel(); ++i) {
      std::vector<int64_t> c = mesh.coordinate_at_index(i);
      if (c[static_cast<size_t>(m)] != 0) continue;
      std::vector<int64_t> g;
      for (int64_t r : mesh.ranks_along(m, c)) g.push_back(r);  // default ranks: rank == linear index
      out.push_back(g);
    }
    return out;
  }

  // Runs one step by its data semantics only (the planner's own bookkeeping is not used).
  void apply(StepKind kind, int64_t m, const Placement& from, const Placement& to) {
    const int64_t n = mesh.sizes()[static_cast<size_t>(m)];
    for (const std::vector<int64_t>& g : groups(m)) {
      std::vector<Array> in;
      for (int64_t r : g) in.push_back(local[static_cast<size_t>(r)]);
      std::vector<Array> out(in.size());
      switch (kind) {
        case StepKind::kAllGather: {
          const Array all = cat(in, std::get<Shard>(from).dim);
          std::fill(out.begin(), out.end(), all);
          break;
        }
        case StepKind::kAllReduce:
          std::fill(out.begin(), out.end(), reduce(in, std::get<Partial>(from).op));
          break;
        case StepKind::kReduceScatter: {
          const Array red = reduce(in, std::get<Partial>(from).op);
          for (int64_t i = 0; i < n; ++i)
            out[static_cast<size_t>(i)] = narrow_chunk(red, std::get<Shard>(to).dim, n, i);
          break;
        }
        case StepKind::kLocalSlice:
          for (int64_t i = 0; i < n; ++i) {
            out[static_cast<size_t>(i)] = narrow_chunk(in[static_cast<size_t>(i)], std::get<Shard>(to).dim, n, i);
          }
          break;
        case StepKind::kAllToAll:
          for (int64_t k = 0; k < n; ++k) {
            std::vector<Array> pieces;
            for (const Array& a : in) pieces.push_back(narrow_chunk(a, std::get<Shard>(to).dim, n, k));
            out[static_cast<size_t>(k)] = cat(pieces, std::get<Shard>(from).dim);
          }
          break;
        case StepKind::kLocalPartial: {
          const ReduceOp op = std::get<Partial>(to).op;
          for (int64_t i = 0; i < n; ++i) {
            out[static_cast<size_t>(i)] = in[static_cast<size_t>(i)];
            if (i > 0 && op == ReduceOp::kSum) std::fill(out[i].data.begin(), out[i].data.end(), 0.0);
            if (i > 0 && op == ReduceOp::kProduct) std::fill(out[i].data.begin(), out[i].data.end(), 1.0);
          }
          break;
        }
      }
      for (size_t i = 0; i < g.size(); ++i) local[static_cast<size_t>(g[i])] = std::move(out[i]);
    }
  }
};

// The block of every rank of `spec` with Partial read as Replicate (the reduced value).
std::vector<Array> reduced_blocks(const Array& global, const MeshShape& mesh, const ShardingSpec& spec) {
  std::vector<Array> out;
  for (int64_t i = 0; i < mesh.numel(); ++i) {
    const LocalLayout l = local_layout(global.shape, mesh, spec, mesh.coordinate_at_index(i));
    out.push_back(box(global, l.offset, l.shape));
  }
  return out;
}

// Distributes `global` as `spec`. Partial dims hold random contributions whose reduction (in any order over the
// partial mesh dims) is exactly the value: integers built so every partial reduction stays an exact integer.
VirtualMesh distribute_random(const Array& global, const MeshShape& mesh, const ShardingSpec& spec, std::mt19937& rng) {
  VirtualMesh vm{mesh, reduced_blocks(global, mesh, spec)};
  const std::optional<ReduceOp> op = spec.partial_op();
  if (!op) return vm;
  std::vector<int64_t> pdims;
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    if (is_partial(spec[m])) pdims.push_back(m);
  }
  auto is_origin = [&](const std::vector<int64_t>& c) {
    return std::all_of(pdims.begin(), pdims.end(), [&](int64_t m) { return c[static_cast<size_t>(m)] == 0; });
  };
  std::uniform_int_distribution<int> small(-3, 3);
  switch (*op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      // sum: the origin of each partial group holds x, the others 0; avg: everyone holds x. Then add, per partial
      // dim m, an offset delta_m(coordinate along m, global element) that sums to zero over the coordinates along m.
      // It does not depend on the other coordinates, so every partial average, in any order, stays an exact integer.
      for (int64_t i = 0; i < mesh.numel(); ++i) {
        if (*op == ReduceOp::kSum && !is_origin(mesh.coordinate_at_index(i))) {
          std::fill(vm.local[i].data.begin(), vm.local[i].data.end(), 0.0);
        }
      }
      for (int64_t m : pdims) {
        const int64_t n = mesh.sizes()[static_cast<size_t>(m)];
        std::vector<Array> delta(static_cast<size_t>(n), make_array(global.shape));
        for (int64_t k = 0; k + 1 < n; ++k) {
          for (size_t e = 0; e < global.data.size(); ++e) {
            delta[static_cast<size_t>(k)].data[e] = small(rng);
            delta[static_cast<size_t>(n - 1)].data[e] -= delta[static_cast<size_t>(k)].data[e];
          }
        }
        for (int64_t i = 0; i < mesh.numel(); ++i) {
          const std::vector<int64_t> c = mesh.coordinate_at_index(i);
          const LocalLayout l = local_layout(global.shape, mesh, spec, c);
          const Array d = box(delta[static_cast<size_t>(c[static_cast<size_t>(m)])], l.offset, l.shape);
          for (size_t e = 0; e < d.data.size(); ++e) vm.local[static_cast<size_t>(i)].data[e] += d.data[e];
        }
      }
      break;
    }
    case ReduceOp::kMax:
    case ReduceOp::kMin: {
      // Everyone holds x moved away by 0..3 (down for max, up for min), except one random member per element of
      // each partial "replica group", which holds x exactly.
      const double sign = *op == ReduceOp::kMax ? -1.0 : 1.0;
      std::uniform_int_distribution<int> away(0, 3);
      std::vector<std::vector<int64_t>> members(static_cast<size_t>(mesh.numel()));  // origin -> its partial group
      for (int64_t i = 0; i < mesh.numel(); ++i) {
        std::vector<int64_t> c = mesh.coordinate_at_index(i);
        for (int64_t m : pdims) c[static_cast<size_t>(m)] = 0;
        members[static_cast<size_t>(mesh.linear_index(c))].push_back(i);
      }
      for (const auto& grp : members) {
        if (grp.empty()) continue;
        const size_t numel = vm.local[static_cast<size_t>(grp[0])].data.size();
        for (size_t e = 0; e < numel; ++e) {
          const size_t keep = rng() % grp.size();
          for (size_t k = 0; k < grp.size(); ++k) {
            if (k != keep) vm.local[static_cast<size_t>(grp[k])].data[e] += sign * away(rng);
          }
        }
      }
      break;
    }
    case ReduceOp::kProduct: {
      // Random signs; the origin carries x times the product of the others' signs.
      std::vector<std::vector<int64_t>> members(static_cast<size_t>(mesh.numel()));
      for (int64_t i = 0; i < mesh.numel(); ++i) {
        std::vector<int64_t> c = mesh.coordinate_at_index(i);
        for (int64_t m : pdims) c[static_cast<size_t>(m)] = 0;
        members[static_cast<size_t>(mesh.linear_index(c))].push_back(i);
      }
      for (const auto& grp : members) {
        if (grp.empty()) continue;
        const size_t numel = vm.local[static_cast<size_t>(grp[0])].data.size();
        for (size_t e = 0; e < numel; ++e) {
          double sign_product = 1;
          for (size_t k = 1; k < grp.size(); ++k) {
            const double s = (rng() & 1) ? 1.0 : -1.0;
            vm.local[static_cast<size_t>(grp[k])].data[e] = s;
            sign_product *= s;
          }
          vm.local[static_cast<size_t>(grp[0])].data[e] *= sign_product;  // grp[0] is the origin (smallest index)
        }
      }
      break;
    }
  }
  return vm;
}

// Distributes with the local_partial semantics (what R -> P(op) produces): the exact expected state of a target.
VirtualMesh distribute_exact(const Array& global, const MeshShape& mesh, const ShardingSpec& spec) {
  VirtualMesh vm{mesh, reduced_blocks(global, mesh, spec)};
  for (int64_t i = 0; i < mesh.numel(); ++i) {
    const std::vector<int64_t> c = mesh.coordinate_at_index(i);
    for (int64_t m = 0; m < mesh.ndim(); ++m) {
      const auto* p = std::get_if<Partial>(&spec[m]);
      if (p == nullptr || c[static_cast<size_t>(m)] == 0) continue;
      if (p->op == ReduceOp::kSum) std::fill(vm.local[i].data.begin(), vm.local[i].data.end(), 0.0);
      if (p->op == ReduceOp::kProduct) std::fill(vm.local[i].data.begin(), vm.local[i].data.end(), 1.0);
    }
  }
  return vm;
}

// Reduces every Partial mesh dim of `spec` (all-reduce by the test's own semantics) and compares with the blocks.
::testing::AssertionResult matches_target(VirtualMesh vm, const Array& global, const ShardingSpec& spec) {
  for (int64_t m = 0; m < vm.mesh.ndim(); ++m) {
    if (is_partial(spec[m])) vm.apply(StepKind::kAllReduce, m, spec[m], Replicate{});
  }
  const std::vector<Array> want = reduced_blocks(global, vm.mesh, spec);
  for (size_t i = 0; i < want.size(); ++i) {
    if (vm.local[i] == want[i]) continue;
    return ::testing::AssertionFailure() << "rank " << i << " holds shape " << shape_str(vm.local[i].shape)
                                         << ", expected " << shape_str(want[i].shape) << " (or different values)";
  }
  return ::testing::AssertionSuccess();
}

Array random_global(const Shape& shape, std::mt19937& rng) {
  Array a = make_array(shape);
  std::uniform_int_distribution<int> v(-9, 9);
  for (double& x : a.data) x = v(rng);
  return a;
}

// A random spec: each mesh dim S(d), R or P(op) (one op for the whole spec), random shard orders.
ShardingSpec random_spec(std::mt19937& rng, int64_t mesh_ndim, int64_t tensor_ndim, ReduceOp op, int partial_weight) {
  std::vector<Placement> ps;
  for (int64_t m = 0; m < mesh_ndim; ++m) {
    const int c = static_cast<int>(rng() % static_cast<unsigned>(2 + partial_weight + tensor_ndim));
    if (c < tensor_ndim + 1) {
      ps.push_back(c < tensor_ndim ? Placement{Shard{c}} : Placement{Replicate{}});
    } else if (c == tensor_ndim + 1) {
      ps.push_back(Shard{static_cast<int64_t>(rng() % static_cast<unsigned>(tensor_ndim))});
    } else {
      ps.push_back(Partial{op});
    }
  }
  ShardOrder order;
  for (size_t m = 0; m < ps.size(); ++m) {
    if (const auto* s = std::get_if<Shard>(&ps[m])) order[s->dim].push_back(static_cast<int64_t>(m));
  }
  for (auto& [d, v] : order) std::shuffle(v.begin(), v.end(), rng);
  return ShardingSpec(ps, order);
}

MeshShape random_mesh(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0:
      return MeshShape({1 + static_cast<int64_t>(rng() % 5)});
    case 1:
    case 2:
      return MeshShape({1 + static_cast<int64_t>(rng() % 3), 1 + static_cast<int64_t>(rng() % 3)});
    default:
      return MeshShape({1 + static_cast<int64_t>(rng() % 2), 1 + static_cast<int64_t>(rng() % 3),
                        1 + static_cast<int64_t>(rng() % 2)});
  }
}

Shape random_shape(std::mt19937& rng, int64_t ndim) {
  Shape s;
  for (int64_t d = 0; d < ndim; ++d) s.push_back(static_cast<int64_t>(rng() % 8));
  return s;
}

bool shard_to_partial(const ShardingSpec& src, const ShardingSpec& dst) {
  for (int64_t m = 0; m < src.mesh_ndim(); ++m) {
    if (is_shard(src[m]) && is_partial(dst[m])) return true;
  }
  return false;
}

// Runs a plan on the virtual mesh, checking that its steps chain from src to dst.
void run_plan(VirtualMesh& vm, const Plan& plan) {
  ShardingSpec cur = plan.src;
  for (const PlanStep& s : plan.steps) {
    ASSERT_EQ(s.before, cur);
    ASSERT_EQ(s.before.placement(s.mesh_dim), s.from);
    ASSERT_EQ(s.after, s.before.with_placement(s.mesh_dim, s.to));
    ASSERT_FALSE(s.after.has_mixed_partial()) << s.after;
    vm.apply(s.kind, s.mesh_dim, s.from, s.to);
    cur = s.after;
  }
  ASSERT_EQ(cur, plan.dst);
}

TEST(Planner, RandomRedistributionsBySimulation) {
  std::mt19937 rng(20240611);
  int64_t planned = 0, unsupported = 0, nested = 0, with_partial = 0, steps = 0;
  for (int trial = 0; trial < 10000; ++trial) {
    const MeshShape mesh = random_mesh(rng);
    const int64_t tdim = 1 + static_cast<int64_t>(rng() % 3);
    const Shape shape = random_shape(rng, tdim);
    const ReduceOp op1 = kOps[rng() % 5];
    const ReduceOp op2 = rng() % 2 ? op1 : kOps[rng() % 5];
    const ShardingSpec src = random_spec(rng, mesh.ndim(), tdim, op1, 1);
    const ShardingSpec dst = random_spec(rng, mesh.ndim(), tdim, op2, 1);
    if (shard_to_partial(src, dst)) {
      EXPECT_THROW(plan_redistribution_uncached(mesh, shape, 4, src, dst), Unsupported) << src << " -> " << dst;
      ++unsupported;
      continue;
    }
    const Plan plan = plan_redistribution_uncached(mesh, shape, 4, src, dst);
    const Array global = random_global(shape, rng);
    VirtualMesh vm = distribute_random(global, mesh, src, rng);
    run_plan(vm, plan);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(matches_target(vm, global, dst))
        << "plan " << plan.to_string() << " on " << mesh << " global " << shape_str(shape);
    if (!src.has_partial()) {
      // Without partial inputs the result is fully determined: the exact target state.
      ASSERT_EQ(vm.local, distribute_exact(global, mesh, dst).local) << plan.to_string();
    }
    double cost = 0;
    for (const PlanStep& s : plan.steps) cost += s.cost;
    EXPECT_DOUBLE_EQ(plan.cost, cost);
    ++planned;
    nested += !src.has_default_order() || !dst.has_default_order();
    with_partial += src.has_partial() || dst.has_partial();
    steps += static_cast<int64_t>(plan.steps.size());
  }
  EXPECT_GT(planned, 6000);
  EXPECT_GT(nested, 1000);
  EXPECT_GT(with_partial, 2500);
  EXPECT_GT(unsupported, 500);
  std::printf("planner: %lld plans (%lld nested, %lld with Partial, %lld steps), %lld unsupported\n",
              static_cast<long long>(planned), static_cast<long long>(nested), static_cast<long long>(with_partial),
              static_cast<long long>(steps), static_cast<long long>(unsupported));
}

// Every step sequence of length <= max_len from src that ends at dst, built with make_step (which rejects steps that
// are not legal); calls fn(steps) for each.
void enumerate_sequences(const MeshShape& mesh, const Shape& shape, const ShardingSpec& cur, const ShardingSpec& dst,
                         const std::vector<Placement>& candidates, int max_len, std::vector<PlanStep>& path,
                         const std::function<void(const std::vector<PlanStep>&)>& fn) {
  if (cur == dst) {
    fn(path);
    return;
  }
  if (static_cast<int>(path.size()) == max_len) return;
  const bool last = static_cast<int>(path.size()) + 1 == max_len;
  for (int64_t m = 0; m < mesh.ndim(); ++m) {
    for (const Placement& p : candidates) {
      if (last && !(p == dst[m])) continue;  // the last step must put the target placement
      PlanStep step;
      try {
        step = make_step(mesh, shape, 4, cur, m, p);
      } catch (const Unsupported&) {
        continue;
      }
      path.push_back(step);
      enumerate_sequences(mesh, shape, step.after, dst, candidates, max_len, path, fn);
      path.pop_back();
    }
  }
}

TEST(Planner, NeverCostlierThanEnumeratedPlans) {
  std::mt19937 rng(99);
  int64_t cases = 0, sequences = 0, strictly_worse = 0;
  for (int trial = 0; trial < 180; ++trial) {
    const int kind = trial % 6;  // 0, 1: 1-d mesh; 2..4: 2-d; 5: 3-d (1-d tensors only, to keep it fast)
    const MeshShape mesh = kind < 2 ? MeshShape({1 + static_cast<int64_t>(rng() % 4)})
                           : kind < 5
                               ? MeshShape({1 + static_cast<int64_t>(rng() % 3), 2 + static_cast<int64_t>(rng() % 2)})
                               : MeshShape({2, 1 + static_cast<int64_t>(rng() % 2), 2});
    const int64_t tdim = kind == 5 ? 1 : 1 + static_cast<int64_t>(rng() % 2);
    const Shape shape = random_shape(rng, tdim);
    const ReduceOp op1 = kOps[rng() % 5];
    const ReduceOp op2 = rng() % 2 ? op1 : kOps[rng() % 5];
    const ShardingSpec src = random_spec(rng, mesh.ndim(), tdim, op1, 1);
    const ShardingSpec dst = random_spec(rng, mesh.ndim(), tdim, op2, 1);
    if (shard_to_partial(src, dst)) continue;
    const Plan plan = plan_redistribution_uncached(mesh, shape, 4, src, dst);
    // Candidates: every Shard, R and Partial with every op (the planner only tries the ops of src and dst).
    std::vector<Placement> candidates = {Replicate{}};
    for (int64_t d = 0; d < tdim; ++d) candidates.push_back(Shard{d});
    for (ReduceOp op : kOps) candidates.push_back(Partial{op});
    const Array global = random_global(shape, rng);
    const VirtualMesh start = distribute_random(global, mesh, src, rng);
    std::vector<PlanStep> path;
    enumerate_sequences(mesh, shape, src, dst, candidates, 5, path, [&](const std::vector<PlanStep>& seq) {
      double cost = 0;
      for (const PlanStep& s : seq) cost += s.cost;
      // Every legal sequence is a valid plan: the simulation reaches the target.
      VirtualMesh vm = start;
      for (const PlanStep& s : seq) vm.apply(s.kind, s.mesh_dim, s.from, s.to);
      EXPECT_TRUE(matches_target(vm, global, dst))
          << "sequence of " << seq.size() << " steps from " << src << " to " << dst;
      EXPECT_LE(plan.cost, cost * (1 + 1e-12))
          << "planner: " << plan.to_string() << "\ncheaper sequence of " << seq.size() << " steps, cost " << cost
          << ", first " << (seq.empty() ? "-" : seq[0].to_string());
      strictly_worse += cost > plan.cost * (1 + 1e-9);
      ++sequences;
    });
    ++cases;
  }
  EXPECT_GT(cases, 120);
  EXPECT_GT(sequences, 5000);
  EXPECT_GT(strictly_worse, 5000);
  std::printf("optimality: %lld cases, %lld sequences compared (%lld strictly costlier)\n",
              static_cast<long long>(cases), static_cast<long long>(sequences), static_cast<long long>(strictly_worse));
}

TEST(Planner, KnownPlans) {
  const MeshShape mesh({2, 4}, {"dp", "tp"});
  auto kinds = [](const Plan& p) {
    std::vector<std::string> out;
    for (const PlanStep& s : p.steps) out.push_back(str_cat(s.mesh_dim, ":", step_kind_name(s.kind)));
    return out;
  };
  using V = std::vector<std::string>;
  const Shape g{16, 8};
  EXPECT_EQ(kinds(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0),R"), ShardingSpec::parse("R,R"))),
            V{"0:all_gather"});
  EXPECT_EQ(
      kinds(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("R,P(sum)"), ShardingSpec::parse("R,S(1)"))),
      V{"1:reduce_scatter"});
  EXPECT_EQ(
      kinds(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("R,P(sum)"), ShardingSpec::parse("R,R"))),
      V{"1:all_reduce"});
  EXPECT_EQ(
      kinds(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0),R"), ShardingSpec::parse("S(1),R"))),
      V{"0:all_to_all"});
  V local =
      kinds(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("R,R"), ShardingSpec::parse("P(avg),S(0)")));
  std::sort(local.begin(), local.end());
  EXPECT_EQ(local, (V{"0:local_partial", "1:local_slice"}));
  // P(sum) -> P(max) on one mesh dim goes through R.
  EXPECT_EQ(
      kinds(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("P(sum),R"), ShardingSpec::parse("P(max),R"))),
      (V{"0:all_reduce", "0:local_partial"}));
  // Nested: S(0),S(0) to the FSDP-over-TP order: the inner splitter (tp) is undone first.
  const Plan nested = plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0),S(0)"),
                                                   ShardingSpec::parse("S(0)[1],S(0)[0]"));
  ASSERT_FALSE(nested.steps.empty());
  EXPECT_EQ(nested.steps.front().mesh_dim, 1);
  EXPECT_EQ(nested.steps.front().before, ShardingSpec::parse("S(0),S(0)"));
  // Same spec: empty plan.
  EXPECT_TRUE(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0)[1],S(0)[0]"),
                                           ShardingSpec::parse("S(0)[1],S(0)[0]"))
                  .steps.empty());
  // Bytes: all-gather of S(0) over dp=2 of a [16, 8] f32 tensor: each rank sends its 8x8 block once.
  const Plan ag = plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0),R"), ShardingSpec::parse("R,R"));
  EXPECT_EQ(ag.steps[0].bytes_moved, 8 * 8 * 4);
  EXPECT_EQ(ag.steps[0].group_size, 2);
  const CostModel model;
  EXPECT_DOUBLE_EQ(ag.cost, model.launch + model.alpha * 1 + model.beta * 256);
  // All-reduce over tp=4 of 16x8 f32: 2 * 3 * 128/4 * 4 bytes.
  EXPECT_EQ(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("R,P(sum)"), ShardingSpec::parse("R,R"))
                .steps[0]
                .bytes_moved,
            2 * 3 * 32 * 4);
  // Uneven: S(0) of 7 rows over 4 pads to chunks of 2 rows.
  EXPECT_EQ(
      plan_redistribution_uncached(MeshShape({4}), {7, 3}, 2, ShardingSpec::parse("S(0)"), ShardingSpec::parse("R"))
          .steps[0]
          .bytes_moved,
      3 * 2 * 3 * 2);
}

TEST(Planner, UnsupportedAndInvalidRequests) {
  const MeshShape mesh({2, 2});
  const Shape g{4, 4};
  auto expect_msg = [](auto fn, const std::vector<std::string>& needles) {
    try {
      fn();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  };
  EXPECT_THROW(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0),R"), ShardingSpec::parse("P(sum),R")),
               Unsupported);
  expect_msg(
      [&] { plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0),R"), ShardingSpec::parse("P(sum),R")); },
      {"S(0),R", "P(sum),R", "Shard -> Partial"});
  EXPECT_THROW(
      plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("P(sum),P(max)"), ShardingSpec::parse("R,R")),
      Unsupported);
  expect_msg(
      [&] {
        plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("R,R"), ShardingSpec::parse("P(avg),P(min)"));
      },
      {"R,R", "P(avg),P(min)", "mixes"});
  EXPECT_THROW(
      plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("R,R"), ShardingSpec::parse("P(avg),P(min)")),
      Unsupported);
  // Invalid arguments.
  EXPECT_THROW(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(0)"), ShardingSpec::parse("R,R")),
               InvalidArgument);
  EXPECT_THROW(plan_redistribution_uncached(mesh, g, 4, ShardingSpec::parse("S(2),R"), ShardingSpec::parse("R,R")),
               InvalidArgument);
  EXPECT_THROW(plan_redistribution_uncached(mesh, g, 0, ShardingSpec::parse("S(0),R"), ShardingSpec::parse("R,R")),
               InvalidArgument);
  // make_step rejects what is not one step.
  const ShardingSpec nested = ShardingSpec::parse("S(0),S(0)");
  EXPECT_THROW(make_step(mesh, g, 4, nested, 0, Replicate{}), Unsupported);  // not innermost
  EXPECT_NO_THROW(make_step(mesh, g, 4, nested, 1, Replicate{}));
  EXPECT_THROW(make_step(mesh, g, 4, ShardingSpec::parse("S(0),R"), 0, Partial{}), Unsupported);
  EXPECT_THROW(make_step(mesh, g, 4, ShardingSpec::parse("P(sum),R"), 0, Partial{ReduceOp::kMax}), Unsupported);
  EXPECT_THROW(make_step(mesh, g, 4, ShardingSpec::parse("P(sum),R"), 1, Partial{ReduceOp::kMax}), Unsupported);
  EXPECT_THROW(make_step(mesh, g, 4, ShardingSpec::parse("R,R"), 1, Replicate{}), Unsupported);
  EXPECT_THROW(make_step(mesh, g, 4, ShardingSpec::parse("R,R"), 1, Shard{2}), InvalidArgument);
}

TEST(Planner, CacheIsSharedAndThreadSafe) {
  clear_plan_cache();
  const MeshShape mesh({2, 3}, {"dp", "tp"});
  const ShardingSpec src = ShardingSpec::parse("S(0),R");
  const ShardingSpec dst = ShardingSpec::parse("R,S(1)");
  const Plan& a = plan_redistribution(mesh, {7, 5}, 4, src, dst);
  const Plan& b = plan_redistribution(MeshShape({2, 3}), {7, 5}, 4, src, dst);  // names do not matter
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &plan_redistribution(mesh, {7, 5}, 2, src, dst));
  PlanCacheStats st = plan_cache_stats();
  EXPECT_EQ(st.size, 2);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 2);
  // Many threads asking for the same and different plans get consistent answers.
  std::vector<const Plan*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const Plan& p = plan_redistribution(mesh, {7, 5 + i % 5}, 4, src, dst);
        if (i == 0) seen[static_cast<size_t>(t)] = &p;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const Plan* p : seen) EXPECT_EQ(p, &a);
  st = plan_cache_stats();
  EXPECT_EQ(st.size, 6);
  EXPECT_EQ(st.hits + st.misses, 3 + 8 * 50);
  const Plan fresh = plan_redistribution_uncached(mesh, {7, 5}, 4, src, dst);
  EXPECT_EQ(fresh.to_json(), a.to_json());
  // Errors are not cached and name source and target.
  EXPECT_THROW(plan_redistribution(mesh, {7, 5}, 4, src, ShardingSpec::parse("P(sum),R")), Unsupported);
  clear_plan_cache();
  EXPECT_EQ(plan_cache_stats().size, 0);
}

TEST(Planner, DescribesPlans) {
  const Plan plan = plan_redistribution_uncached(MeshShape({2, 3}), {7, 5}, 4, ShardingSpec::parse("S(0),R"),
                                                 ShardingSpec::parse("R,S(1)"));
  const std::string text = plan.to_string();
  EXPECT_NE(text.find("plan S(0),R -> R,S(1)"), std::string::npos) << text;
  EXPECT_NE(text.find("all_gather S(0) -> R"), std::string::npos) << text;
  EXPECT_NE(text.find("local_slice R -> S(1)"), std::string::npos) << text;
  const std::string json = plan.to_json();
  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"kind\":\"all_gather\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"from\":\"S(0),R\""), std::string::npos) << json;
}

}  // namespace
}  // namespace dt
