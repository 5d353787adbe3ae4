// Cross-mesh redistribution: point-to-point transfers of exactly the overlapping index ranges, planned once per
// (meshes, specs, shape) by placement/transfer_plan.h (Note [cross-mesh plan] there).
#include <memory>

#include "core/error.h"
#include "dtensor/redistribute/executor.h"
#include "dtensor/redistribute/transition.h"
#include "placement/layout.h"
#include "placement/planner.h"

namespace dt::redistribute {

namespace {

// The view of `t` (holding `box`) covering `region` (inside box).
Tensor region_view(const Tensor& t, const Box& box, const Box& region) {
  Tensor v = t;
  for (size_t d = 0; d < box.size(); ++d) v = v.narrow(int64_t(d), region[d].begin - box[d].begin, region[d].size());
  return v;
}

}  // namespace

bool CrossMeshTransition::is_suitable(const DeviceMesh& src, const DeviceMesh& dst, std::string* why) const {
  if (src.world() != dst.world()) {
    *why = "both meshes must be created from the same world communicator";
    return false;
  }
  if (src.device() != dst.device()) {
    *why = str_cat("moving from ", src.device(), " to ", dst.device(),
                   " is not supported; use to(device) on the local tensors");
    return false;
  }
  return true;
}

PendingStep CrossMeshTransition::start(const TransferContext& c) const {
  const int64_t me = c.world->rank();
  auto out = std::make_shared<Tensor>(Tensor::empty(c.out_shape, c.dtype, c.device));
  auto unpack = std::make_shared<std::vector<std::pair<Tensor, Tensor>>>();  // (destination view, receive buffer)
  std::vector<WorkPtr> works;
  std::vector<Tensor> keep_alive;  // packed send buffers, until the sends complete
  for (int32_t i : c.plan.involving(me)) {
    const BlockTransfer& x = c.plan.transfers[size_t(i)];
    if (x.sender == me && x.receiver == me) {
      region_view(*out, x.dst_box, x.region).copy_(region_view(c.input, x.src_box, x.region));
    } else if (x.sender == me) {
      Tensor region = region_view(c.input, x.src_box, x.region);
      Tensor buf = region;
      if (!region.is_contiguous()) {
        buf = Tensor::empty(region.shape(), c.dtype, c.device);
        buf.copy_(region);
      }
      keep_alive.push_back(buf);
      works.push_back(c.world->send(buf, int(x.receiver)));
    } else {
      Tensor dst = region_view(*out, x.dst_box, x.region);
      Tensor buf = dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), c.dtype, c.device);
      works.push_back(c.world->recv(buf, int(x.sender)));
      if (!buf.shares_storage_with(dst)) unpack->push_back({dst, buf});
    }
  }
  // One pending result: the closure waits for the other transfers (the last one is the step's work).
  WorkPtr last;
  if (!works.empty()) {
    last = works.back();
    works.pop_back();
  }
  auto rest = std::make_shared<std::vector<WorkPtr>>(std::move(works));
  auto bufs = std::make_shared<std::vector<Tensor>>(std::move(keep_alive));
  return {last,
          [out, unpack, rest, bufs]() {
            for (auto& w : *rest) w->wait();
            for (auto& [dst, buf] : *unpack) dst.copy_(buf);
            bufs->clear();
            return std::move(*out);
          },
          Tensor()};
}

Tensor run_transfer(const TransferContext& ctx) {
  PendingStep step = cross_mesh_transition().start(ctx);
  if (step.work) step.work->wait();
  return step.finish();
}

Tensor run_cross_mesh(const DeviceMesh& src_mesh, const ShardingSpec& src_spec, const Tensor& local,
                      const DeviceMesh& dst_mesh, const ShardingSpec& dst_spec, const Shape& global, DType dtype) {
  std::string why;
  DT_CHECK_ARG(cross_mesh_transition().is_suitable(src_mesh, dst_mesh, &why), "cross-mesh redistribution from ",
               src_mesh, " to ", dst_mesh, ": ", why);
  // 1. Reduce Partial source dims inside the source mesh.
  const ShardingSpec src_plain = without_partial(src_spec);
  const ShardingSpec dst_plain = without_partial(dst_spec);
  Tensor src_local = local;
  if (src_mesh.is_member() && !(src_plain == src_spec))
    src_local = run_plan(src_mesh, global,
                         plan_redistribution(src_mesh.shape(), global, dtype_size(dtype), src_spec, src_plain), local);
  // 2. The transfers (cached plan).
  const TransferPlan& plan = plan_transfers(src_mesh.shape(), src_plain, dst_mesh.shape(), dst_plain, global);
  const Shape out_shape =
      dst_mesh.is_member() ? local_shape(global, dst_mesh.shape(), dst_plain, dst_mesh.coordinate()) : Shape{0};
  Tensor out = run_transfer({src_mesh.world(), plan, src_local, out_shape, dtype, src_mesh.device()});
  // 3. Partial target dims, by the exact local rule (no communication).
  if (dst_mesh.is_member()) out = partial_local_block(std::move(out), dst_spec, dst_mesh.coordinate());
  return out;
}

}  // namespace dt::redistribute
