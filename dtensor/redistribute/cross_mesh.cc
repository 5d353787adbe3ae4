// Cross-mesh redistribution: point-to-point transfers of exactly the overlapping index ranges.
//
// Note [cross-mesh plan]
// Partial source dims are first reduced inside the source mesh (P -> R), and Partial target dims are produced at
// the end by the exact local rule (R -> P), so the transfer itself moves plain blocks. The distinct source blocks
// tile the global tensor; for each (target rank t, source block S) with a non-empty overlap, one holder of S sends
// the overlap to t: t itself when it holds S (a local copy), else holder number (t's index in the target mesh)
// modulo the number of holders, which spreads the load over replicas. Every rank derives the same list from the
// layout math alone, so the messages between two ranks are matched by their order.
#include <algorithm>
#include <map>

#include "core/error.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/redistribute/transition.h"
#include "placement/layout.h"
#include "placement/planner.h"

namespace dt::redistribute {

namespace {

using Box = std::vector<IndexRange>;

ShardingSpec without_partial(const ShardingSpec& spec) {
  ShardingSpec out = spec;
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
    if (is_partial(spec[m])) out = out.with_placement(m, Replicate{});
  return out;
}

bool intersect(const Box& a, const Box& b, Box* out) {
  out->resize(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    (*out)[d] = {std::max(a[d].begin, b[d].begin), std::min(a[d].end, b[d].end)};
    if ((*out)[d].begin >= (*out)[d].end) return false;
  }
  return true;
}

// The view of `t` (holding `box`) covering `region` (inside box).
Tensor region_view(const Tensor& t, const Box& box, const Box& region) {
  Tensor v = t;
  for (size_t d = 0; d < box.size(); ++d)
    v = v.narrow(int64_t(d), region[d].begin - box[d].begin, region[d].size());
  return v;
}

struct Transfer {
  int64_t sender, receiver;
  Box src_box, dst_box, region;
};

}  // namespace

Tensor run_cross_mesh(const DeviceMesh& src_mesh, const ShardingSpec& src_spec, const Tensor& local,
                      const DeviceMesh& dst_mesh, const ShardingSpec& dst_spec, const Shape& global, DType dtype) {
  DT_CHECK_ARG(src_mesh.world() == dst_mesh.world(), "cross-mesh redistribution from ", src_mesh, " to ", dst_mesh,
               ": both meshes must be created from the same world communicator");
  DT_CHECK_ARG(src_mesh.device() == dst_mesh.device(), "cross-mesh redistribution from ", src_mesh.device(), " to ",
               dst_mesh.device(), ": moving between device types is not supported; use to(device) on the local "
               "tensors");
  const CommunicatorPtr& world = src_mesh.world();
  const int64_t me = world->rank();
  const Device device = src_mesh.device();

  // 1. Reduce Partial source dims inside the source mesh.
  ShardingSpec src_plain = without_partial(src_spec);
  Tensor src_local = local;
  if (src_mesh.is_member() && !(src_plain == src_spec)) {
    const Plan& plan = plan_redistribution(src_mesh.shape(), global, dtype_size(dtype), src_spec, src_plain);
    src_local = run_plan(src_mesh, global, plan, local);
  }
  ShardingSpec dst_plain = without_partial(dst_spec);

  // 2. Distinct source blocks and their holders.
  auto box_cmp = [](const Box& a, const Box& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](const IndexRange& x,
                                                                                    const IndexRange& y) {
      return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
    });
  };
  std::vector<std::pair<Box, std::vector<int64_t>>> blocks;
  for (int64_t r : src_mesh.shape().ranks()) {
    Box b = local_ranges(global, src_mesh.shape(), src_plain, src_mesh.shape().coordinate_of(r));
    auto it = std::find_if(blocks.begin(), blocks.end(), [&](const auto& e) { return e.first == b; });
    if (it == blocks.end()) blocks.push_back({b, {r}});
    else it->second.push_back(r);
  }
  std::sort(blocks.begin(), blocks.end(), [&](const auto& x, const auto& y) { return box_cmp(x.first, y.first); });

  // 3. The transfers, in an order every rank agrees on.
  std::vector<Transfer> transfers;
  const auto& dst_ranks = dst_mesh.shape().ranks();
  for (size_t ti = 0; ti < dst_ranks.size(); ++ti) {
    int64_t t = dst_ranks[ti];
    Box tbox = local_ranges(global, dst_mesh.shape(), dst_plain, dst_mesh.shape().coordinate_of(t));
    for (const auto& [sbox, hs] : blocks) {
      Box region;
      if (!intersect(sbox, tbox, &region)) continue;
      int64_t sender = std::find(hs.begin(), hs.end(), t) != hs.end() ? t : hs[ti % hs.size()];
      transfers.push_back({sender, t, sbox, tbox, region});
    }
  }

  // 4. Post every receive and send, then wait for all of them.
  Tensor out;
  if (dst_mesh.is_member()) out = Tensor::empty(local_shape(global, dst_mesh.shape(), dst_plain,
                                                            dst_mesh.coordinate()), dtype, device);
  else out = Tensor::empty({0}, dtype, device);
  std::vector<WorkPtr> works;
  std::vector<std::pair<Tensor, Tensor>> unpack;  // (destination view, receive buffer)
  std::vector<Tensor> keep_alive;
  for (const Transfer& x : transfers) {
    if (x.sender == me && x.receiver == me) {
      region_view(out, x.dst_box, x.region).copy_(region_view(src_local, x.src_box, x.region));
    } else if (x.sender == me) {
      Tensor region = region_view(src_local, x.src_box, x.region);
      Tensor buf = region;
      if (!region.is_contiguous()) {
        buf = Tensor::empty(region.shape(), dtype, device);
        buf.copy_(region);
      }
      keep_alive.push_back(buf);
      works.push_back(world->send(buf, int(x.receiver)));
    } else if (x.receiver == me) {
      Tensor dst = region_view(out, x.dst_box, x.region);
      Tensor buf = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), dtype, device);
      works.push_back(world->recv(buf, int(x.sender)));
      if (!buf.shares_storage_with(dst)) unpack.push_back({dst, buf});
    }
  }
  for (auto& w : works) w->wait();
  for (auto& [dst, buf] : unpack) dst.copy_(buf);

  // 5. Partial target dims, by the exact local rule.
  if (dst_mesh.is_member()) {
    for (int64_t m = 0; m < dst_spec.mesh_ndim(); ++m) {
      if (!is_partial(dst_spec[m]) || dst_mesh.coordinate()[size_t(m)] == 0) continue;
      ReduceOp op = std::get<Partial>(dst_spec[m]).op;
      if (op == ReduceOp::kSum || op == ReduceOp::kProduct)
        out = Tensor::full(out.shape(), op == ReduceOp::kSum ? 0.0 : 1.0, dtype, device);
    }
  }
  return out;
}

}  // namespace dt::redistribute
