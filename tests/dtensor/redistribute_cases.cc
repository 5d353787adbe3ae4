#include "tests/dtensor/redistribute_cases.h"

#include <numeric>
#include <sstream>

#include "dtensor/comm_counter.h"
#include "dtensor/dtensor.h"
#include "placement/layout.h"
#include "placement/planner.h"

namespace dt::testing {

Tensor case_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  // Small integers: products of up to a few factors stay exact in every dtype, and bf16 represents them.
  return Tensor::rand(shape, seed, DType::f64, -4, 5).to(DType::i64).to(dtype);
}

std::vector<ShardingSpec> candidate_specs(int64_t ndim, int64_t mesh_ndim, bool nested_orders, bool all_partial_ops) {
  std::vector<Placement> options{Replicate{}, Partial{ReduceOp::kSum}};
  if (all_partial_ops)
    for (ReduceOp op : {ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct})
      options.push_back(Partial{op});
  for (int64_t d = 0; d < ndim; ++d) options.push_back(Shard{d});
  std::vector<ShardingSpec> out;
  std::vector<size_t> idx(size_t(mesh_ndim), 0);
  while (true) {
    std::vector<Placement> p;
    for (size_t i : idx) p.push_back(options[i]);
    out.emplace_back(p);
    // Nested: two mesh dims sharding the same tensor dim, in the non-default order.
    if (nested_orders && mesh_ndim == 2 && p[0] == p[1] && is_shard(p[0])) {
      ShardOrder order{{std::get<Shard>(p[0]).dim, {1, 0}}};
      out.emplace_back(p, order);
    }
    size_t m = 0;
    while (m < idx.size() && ++idx[m] == options.size()) idx[m++] = 0;
    if (m == idx.size()) break;
  }
  return out;
}

bool expect_unsupported(const ShardingSpec& src, const ShardingSpec& dst) {
  if (src.has_mixed_partial() || dst.has_mixed_partial()) return true;
  for (int64_t m = 0; m < src.mesh_ndim(); ++m)
    if (is_shard(src[m]) && is_partial(dst[m])) return true;
  return false;
}

namespace {

Tensor expected_block(const Tensor& full, const DeviceMesh& mesh, const ShardingSpec& spec) {
  auto ranges = local_ranges(full.shape(), mesh.shape(), spec, mesh.coordinate());
  Tensor v = full;
  for (size_t d = 0; d < ranges.size(); ++d) v = v.narrow(int64_t(d), ranges[d].begin, ranges[d].size());
  return v.contiguous();
}

}  // namespace

MatrixResult run_redistribution_matrix(const CommunicatorPtr& world, const MatrixOptions& options) {
  MatrixResult res;
  uint64_t seed = 1;
  for (const auto& sizes : options.meshes) {
    DeviceMesh mesh = DeviceMesh::create(world, options.device, sizes);
    for (const Shape& shape : options.shapes) {
      std::vector<ShardingSpec> specs =
          candidate_specs(int64_t(shape.size()), mesh.ndim(), options.nested_orders, options.all_partial_ops);
      for (DType dtype : options.dtypes) {
        Tensor full = case_tensor(shape, dtype, seed++);
        const Tensor full_on_device = full.to(options.device);
        for (const ShardingSpec& src : specs) {
          if (src.has_mixed_partial()) continue;
          DTensor x = distribute_tensor(full_on_device, mesh, src.placements(), src.shard_order());
          for (const ShardingSpec& dst : specs) {
            std::ostringstream what;
            what << "mesh " << shape_str(sizes) << " shape " << shape_str(shape) << " " << dtype_name(dtype) << " "
                 << src.to_string() << " -> " << dst.to_string();
            if (expect_unsupported(src, dst)) {
              try {
                x.redistribute(dst);
                res.failures.push_back(what.str() + ": expected Unsupported, but it ran");
              } catch (const Unsupported&) {
                ++res.unsupported;
              }
              continue;
            }
            try {
              const Plan& plan = plan_redistribution(mesh.shape(), shape, dtype_size(dtype), x.spec(), dst);
              CommCounter counter(mesh);
              DTensor y = x.redistribute(dst);
              // The collectives issued are exactly the plan's collective steps, on their mesh dims.
              std::vector<int64_t> want(size_t(mesh.ndim()), 0), got(size_t(mesh.ndim()), 0);
              for (const PlanStep& s : plan.steps)
                if (is_collective(s.kind) && mesh.size(s.mesh_dim) > 1) ++want[size_t(s.mesh_dim)];
              for (const auto& r : counter.records())
                if (r.mesh_dim >= 0) ++got[size_t(r.mesh_dim)];
              if (counter.total() != std::accumulate(want.begin(), want.end(), int64_t(0)) || want != got)
                res.failures.push_back(what.str() + ": collectives " + counter.summary() + " but plan is\n" +
                                       plan.to_string());
              if (y.to_local().device() != options.device)
                res.failures.push_back(what.str() + ": the local block is on " + y.to_local().device().to_string());
              if (!(y.spec() == dst) || y.shape() != shape)
                res.failures.push_back(what.str() + ": result spec " + y.spec().to_string());
              if (!dst.has_partial() && !equal(y.to_local().to(Device::cpu()), expected_block(full, mesh, dst)))
                res.failures.push_back(what.str() + ": local block differs from the layout's block");
              Tensor back = y.full_tensor().to(Device::cpu());
              if (!equal(back, full)) res.failures.push_back(what.str() + ": full_tensor differs");
              ++res.cases;
            } catch (const std::exception& e) {
              res.failures.push_back(what.str() + ": threw " + e.what());
            }
            if (res.failures.size() > 20) return res;
          }
        }
      }
    }
  }
  return res;
}

}  // namespace dt::testing
