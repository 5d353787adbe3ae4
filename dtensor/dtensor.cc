#include "dtensor/dtensor.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <string>

#include "collectives/exchange.h"
#include "core/error.h"
#include "core/logging.h"
#include "dtensor/redistribute/executor.h"
#include "kernels/strided_view.h"
#include "placement/layout.h"
#include "placement/planner.h"
#include "placement/transfer_plan.h"

namespace dt {

// The kernels' limit (pack, unpack, copies of strided views): a DTensor of more dims could be built but never moved.
constexpr int64_t kMaxDims = kernels::kMaxDims;

ShardingSpec make_spec(std::vector<Placement> placements, const ShardOrder& order, int64_t ndim,
                       const DeviceMesh& mesh) {
  DT_CHECK_ARG(ndim <= kMaxDims, "DTensors of more than ", kMaxDims, " dims are not supported, got ", ndim);
  DT_CHECK_ARG(int64_t(placements.size()) == mesh.ndim(), placements.size(), " placements given (",
               to_string(placements), ") for ", mesh.to_string(), " which has ", mesh.ndim(),
               " dims: give one placement per mesh dim");
  ShardingSpec spec(normalize_placements(std::move(placements), ndim), normalize_shard_order(order, ndim));
  spec.check_tensor_ndim(ndim);
  return spec;
}

namespace {

Tensor empty_local(DType dtype, const DeviceMesh& mesh) { return Tensor::empty({0}, dtype, mesh.device()); }

// This rank's block of `full` (a contiguous copy on the mesh's device), with Partial dims by the exact local rule.
Tensor local_block(const Tensor& full, const DeviceMesh& mesh, const ShardingSpec& spec) {
  const ShardingSpec plain = without_partial(spec);
  std::vector<IndexRange> ranges = local_ranges(full.shape(), mesh.shape(), plain, mesh.coordinate());
  Tensor v = full;
  for (size_t d = 0; d < ranges.size(); ++d) v = v.narrow(int64_t(d), ranges[d].begin, ranges[d].size());
  return redistribute::partial_local_block(v.to(mesh.device()).clone(), spec, mesh.coordinate());
}

// distribute_tensor from the mesh's global rank `src` (the tensor is only read there; `full` is undefined on ranks
// that passed shape and dtype). Every member checks that all agree on the source, shape and dtype, then the source
// sends each rank its own block (a TransferPlan from a one-rank mesh holding the whole tensor).
DTensor distribute_from(const Tensor& full, const Shape& shape, DType dtype, const DeviceMesh& mesh,
                        const ShardingSpec& spec, int64_t src) {
  DT_CHECK_ARG(mesh.shape().contains(src), "distribute_tensor: src_data_rank ", src, " is not part of ", mesh,
               " (give the global rank of a member, or std::nullopt when every rank holds the same tensor)");
  if (!mesh.is_member()) return DTensor::from_local_unchecked(empty_local(dtype, mesh), mesh, spec, shape);
  const bool is_src = mesh.global_rank() == src;

  // (source, source without a tensor, dtype, ndim, sizes...): every rank checks everyone against the source's entry
  // after the exchange (never before it: a rank throwing alone would leave the others waiting), so all ranks agree
  // on whether to throw.
  constexpr int64_t kFields = kMaxDims + 4, kHead = 2;
  std::vector<int64_t> mine(size_t(kFields), -1);
  mine[0] = src;
  mine[1] = is_src && !full.defined();
  mine[2] = int64_t(dtype);
  mine[3] = int64_t(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) mine[4 + d] = shape[d];
  const std::vector<int64_t> all = all_gather_ints(*mesh.mesh_comm(), mine);
  const MeshShape& ms = mesh.shape();
  const int64_t* source = all.data() + ms.linear_index(ms.coordinate_of(src)) * kFields;
  auto describe = [](const int64_t* p) {
    return str_cat(shape_str(Shape(p + 4, p + 4 + std::clamp<int64_t>(p[3], 0, kMaxDims))), " ",
                   is_valid_dtype(DType(p[2])) ? dtype_name(DType(p[2])) : "?");
  };
  for (int64_t i = 0; i < ms.numel(); ++i) {
    const int64_t* p = all.data() + i * kFields;
    const int64_t r = ms.ranks()[size_t(i)];
    DT_CHECK_ARG(p[0] == src, "distribute_tensor: rank ", r, " names source rank ", p[0], " but rank ",
                 mesh.global_rank(), " names ", src, ": every rank must pass the same src_data_rank");
  }
  DT_CHECK_ARG(source[1] == 0, "distribute_tensor: rank ", src,
               " is the source (src_data_rank) and must pass the tensor, not only its shape and dtype");
  for (int64_t i = 0; i < ms.numel(); ++i) {
    const int64_t* p = all.data() + i * kFields;
    DT_CHECK_ARG(std::equal(p + kHead, p + kFields, source + kHead), "distribute_tensor: rank ", ms.ranks()[size_t(i)],
                 " passed ", describe(p), " but the source rank ", src, " holds ", describe(source),
                 ": every rank must pass the source's shape and dtype");
  }

  const ShardingSpec plain = without_partial(spec);
  const MeshShape source_mesh({1}, {}, {src});
  const TransferPlan& plan = plan_transfers(source_mesh, ShardingSpec::replicated(1), ms, plain, shape);
  const Tensor input = is_src ? full.to(mesh.device()) : Tensor();
  Tensor block = redistribute::run_transfer(
      {mesh.world(), plan, input, local_shape(shape, ms, plain, mesh.coordinate()), dtype, mesh.device()});
  return DTensor::from_local_unchecked(redistribute::partial_local_block(std::move(block), spec, mesh.coordinate()),
                                       mesh, spec, shape);
}

}  // namespace

// ---- construction ----

DTensor DTensor::from_local_unchecked(Tensor local, DeviceMesh mesh, ShardingSpec spec, Shape global_shape) {
  return DTensor(std::move(local), std::move(mesh), std::move(spec), std::move(global_shape));
}

DTensor DTensor::from_local(const Tensor& local, const DeviceMesh& mesh, std::vector<Placement> placements,
                            std::optional<Shape> global_shape, const FromLocalOptions& options) {
  DT_CHECK_ARG(local.defined(), "from_local: the local tensor is undefined");
  DT_CHECK_ARG(local.dim() <= kMaxDims, "from_local: tensors of more than ", kMaxDims, " dims are not supported");
  DT_CHECK_ARG(local.device() == mesh.device(), "from_local: the local tensor is on ", local.device(),
               " but the mesh is on ", mesh.device());
  ShardingSpec spec = make_spec(std::move(placements), options.shard_order, local.dim(), mesh);
  DT_CHECK_ARG(mesh.is_member(), "from_local on rank ", mesh.global_rank(), " which is not part of ", mesh);
  const MeshShape& ms = mesh.shape();
  Tensor contiguous = local.contiguous();

  if (global_shape && !options.run_check) {
    DT_CHECK_ARG(int64_t(global_shape->size()) == local.dim(), "from_local: global shape ", shape_str(*global_shape),
                 " has ", global_shape->size(), " dims but the local tensor has ", local.dim());
    Shape want = local_shape(*global_shape, ms, spec, mesh.coordinate());
    DT_CHECK_ARG(want == local.shape(), "from_local: rank ", mesh.global_rank(), " at coordinate ",
                 shape_str(mesh.coordinate()), " passed a local tensor of shape ", shape_str(local.shape()),
                 " but global shape ", shape_str(*global_shape), " with placements ", spec.to_string(), " on ",
                 ms.to_string(), " gives it ", shape_str(want));
    return DTensor(contiguous, mesh, spec, *global_shape);
  }

  // Exchange every rank's (ndim, shape) to infer the global shape exactly and check every rank against it, with what
  // must agree everywhere: the dtype, the placements (and shard order) and the global shape given (if any).
  const int64_t n = ms.numel();
  constexpr int64_t kFields = kMaxDims + 4;
  const int64_t kDtype = kMaxDims + 1, kSpec = kMaxDims + 2, kGlobal = kMaxDims + 3;
  std::vector<int64_t> mine(size_t(kFields), -1);
  int64_t* m = mine.data();
  m[0] = local.dim();
  for (int64_t d = 0; d < local.dim(); ++d) m[d + 1] = local.size(d);
  m[kDtype] = int64_t(local.dtype());
  m[kSpec] = int64_t(std::hash<ShardingSpec>{}(spec) >> 1);
  m[kGlobal] = global_shape ? int64_t(std::hash<std::string>{}(shape_str(*global_shape)) >> 1) : -1;
  const std::vector<int64_t> all = all_gather_ints(*mesh.mesh_comm(), mine);
  const int64_t* a = all.data();
  auto shape_of = [&](int64_t idx) {
    const int64_t* p = a + idx * kFields;
    return Shape(p + 1, p + 1 + p[0]);
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* p = a + i * kFields;
    const int64_t r = ms.ranks()[size_t(i)];
    DT_CHECK_ARG(p[0] == local.dim(), "from_local: rank ", r, " passed a ", p[0], "-d local tensor but rank ",
                 mesh.global_rank(), " a ", local.dim(), "-d one");
    DT_CHECK_ARG(p[kDtype] == m[kDtype], "from_local: rank ", r, " passed a ",
                 is_valid_dtype(DType(p[kDtype])) ? dtype_name(DType(p[kDtype])) : "?", " local tensor but rank ",
                 mesh.global_rank(), " a ", dtype_name(local.dtype()), " one");
    DT_CHECK_ARG(p[kSpec] == m[kSpec], "from_local: rank ", r, " passed other placements (or shard order) than rank ",
                 mesh.global_rank(), "'s ", spec.to_string());
    DT_CHECK_ARG(p[kGlobal] == m[kGlobal], "from_local: rank ", r, " passed another global shape than rank ",
                 mesh.global_rank(), "'s ", global_shape ? shape_str(*global_shape) : std::string("(none)"));
  }
  Shape global = global_shape ? *global_shape : Shape(size_t(local.dim()), 0);
  if (!global_shape) {
    // A sharded dim's size is the sum over the coordinates that vary only along its splitters (they tile it);
    // an unsharded dim's size is anyone's.
    for (int64_t d = 0; d < local.dim(); ++d) {
      const std::vector<int64_t>& split = spec.splitters(d);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int64_t> c = ms.coordinate_at_index(i);
        bool base = true;
        for (int64_t m = 0; m < ms.ndim(); ++m)
          if (c[size_t(m)] != 0 && std::find(split.begin(), split.end(), m) == split.end()) base = false;
        if (!base) continue;
        if (split.empty()) {
          global[size_t(d)] = shape_of(i)[size_t(d)];
          break;
        }
        global[size_t(d)] += shape_of(i)[size_t(d)];
      }
    }
  }
  std::ostringstream bad;
  int nbad = 0;
  for (int64_t i = 0; i < n; ++i) {
    Shape want = local_shape(global, ms, spec, ms.coordinate_at_index(i));
    if (want != shape_of(i)) {
      bad << (nbad++ ? "; " : "") << "rank " << ms.ranks()[size_t(i)] << " has " << shape_str(shape_of(i))
          << ", expected " << shape_str(want);
    }
  }
  DT_CHECK_ARG(nbad == 0, "from_local: local shapes are inconsistent with global shape ", shape_str(global),
               " and placements ", spec.to_string(), " on ", ms.to_string(), ": ", bad.str());
  return DTensor(contiguous, mesh, spec, global);
}

DTensor distribute_tensor(const Tensor& full, const DeviceMesh& mesh, std::vector<Placement> placements,
                          const ShardOrder& shard_order, std::optional<int64_t> src_data_rank) {
  DT_CHECK_ARG(full.defined(),
               "distribute_tensor: the tensor is undefined (ranks other than the source may pass "
               "its shape and dtype instead)");
  ShardingSpec spec = make_spec(std::move(placements), shard_order, full.dim(), mesh);
  if (src_data_rank) return distribute_from(full, full.shape(), full.dtype(), mesh, spec, *src_data_rank);
  if (!mesh.is_member())
    return DTensor::from_local_unchecked(empty_local(full.dtype(), mesh), mesh, spec, full.shape());
  return DTensor::from_local_unchecked(local_block(full, mesh, spec), mesh, spec, full.shape());
}

DTensor distribute_tensor(const Shape& global_shape, DType dtype, const DeviceMesh& mesh,
                          std::vector<Placement> placements, const ShardOrder& shard_order, int64_t src_data_rank) {
  ShardingSpec spec = make_spec(std::move(placements), shard_order, int64_t(global_shape.size()), mesh);
  return distribute_from(Tensor(), global_shape, dtype, mesh, spec, src_data_rank);
}

// ---- redistribution ----

DTensor DTensor::redistribute(std::vector<Placement> placements, const ShardOrder& shard_order) const {
  return redistribute_to(make_spec(std::move(placements), shard_order, dim(), mesh_));
}

DTensor DTensor::redistribute(const ShardingSpec& spec) const { return redistribute_to(spec); }

DTensor DTensor::redistribute_to(ShardingSpec spec) const { return redistribute_async_to(std::move(spec)).wait(); }

DTensor DTensor::redistribute(const DeviceMesh& mesh, std::vector<Placement> placements,
                              const ShardOrder& shard_order) const {
  DT_CHECK_ARG(defined(), "redistribute of an undefined DTensor");
  if (mesh == mesh_) return redistribute(std::move(placements), shard_order);
  ShardingSpec spec = make_spec(std::move(placements), shard_order, dim(), mesh);
  Tensor out = redistribute::run_cross_mesh(mesh_, spec_, local_, mesh, spec, shape_, dtype());
  return DTensor(out, mesh, spec, shape_);
}

DTensor DTensor::redistribute_like(const DTensor& other) const {
  DT_CHECK_ARG(defined() && other.defined(), "redistribute_like: ", defined() ? "the target" : "the tensor",
               " is an undefined DTensor");
  if (mesh_ == other.mesh_) return spec_ == other.spec_ ? *this : redistribute_to(other.spec_);
  return redistribute(other.mesh_, other.placements());
}

struct RedistributeHandle::State {
  DTensor result_template;  // mesh, spec and shape of the result, and the input (its local, read by `run`)
  // Holds references into result_template (declared after it); in place, so a redistribution allocates one State.
  std::optional<redistribute::PlanRun> run;
  bool done = false;
  DTensor result;
};

RedistributeHandle DTensor::redistribute_async(std::vector<Placement> placements, const ShardOrder& shard_order) const {
  DT_CHECK_ARG(defined(), "redistribute_async of an undefined DTensor");
  return redistribute_async_to(make_spec(std::move(placements), shard_order, dim(), mesh_));
}

RedistributeHandle DTensor::redistribute_async_to(ShardingSpec spec) const {
  DT_CHECK_ARG(defined(), "redistribute of an undefined DTensor");
  DT_CHECK_ARG(spec.mesh_ndim() == mesh_.ndim(), "redistribute: ", spec.mesh_ndim(), " placements for ", mesh_);
  spec.check_tensor_ndim(dim());
  auto state = std::make_shared<RedistributeHandle::State>();
  state->result_template = DTensor(local_, mesh_, std::move(spec), shape_);
  if (!mesh_.is_member()) {
    state->done = true;
    state->result = std::move(state->result_template);
    return RedistributeHandle(std::move(state));
  }
  const DTensor& t = state->result_template;  // outlives the run (both live in the state)
  const Plan& plan = plan_redistribution(mesh_.shape(), shape_, local_.element_size(), spec_, t.spec());
  DT_LOG_DEBUG("redistribute ", shape_str(shape_), " on ", mesh_.shape().to_string(), ": ", plan.to_string());
  state->run.emplace(t.mesh(), t.shape(), plan, t.to_local());
  return RedistributeHandle(std::move(state));
}

void RedistributeHandle::finish() {
  DT_CHECK_ARG(state_ != nullptr, "wait() on an empty RedistributeHandle");
  if (state_->done) return;
  Tensor out = state_->run->finish();
  state_->run.reset();
  DTensor& t = state_->result_template;  // no longer referenced by the run: its parts move into the result
  t.local_ = std::move(out);
  state_->result = std::move(t);
  state_->done = true;
}

DTensor RedistributeHandle::wait() & {
  finish();
  return state_->result;
}

DTensor RedistributeHandle::wait() && {
  finish();
  return std::move(state_->result);  // the handle is going away: no second wait() can see the moved-from result
}

bool RedistributeHandle::is_completed() const {
  return state_ == nullptr || state_->done || state_->run->in_flight_completed();
}

Tensor DTensor::full_tensor() const {
  DT_CHECK_ARG(defined(), "full_tensor of an undefined DTensor");
  DT_CHECK_ARG(mesh_.is_member(), "full_tensor on rank ", mesh_.global_rank(), " which is not part of ", mesh_);
  return redistribute_to(ShardingSpec::replicated(mesh_.ndim())).to_local();
}

// ---- inspection ----

std::string DTensor::describe() const {
  if (!defined()) return "DTensor(undefined)";
  std::ostringstream os;
  os << "DTensor(global shape " << shape_str(shape_) << ", " << dtype_name(dtype()) << ", placements "
     << spec_.to_string() << ", mesh " << mesh_.shape().to_string() << " on " << mesh_.device();
  if (mesh_.is_member())
    os << ", rank " << mesh_.global_rank() << " at " << shape_str(mesh_.coordinate()) << " holds local shape "
       << shape_str(local_.shape()) << " at offset "
       << shape_str(global_offset(shape_, mesh_.shape(), spec_, mesh_.coordinate()));
  else
    os << ", rank " << mesh_.global_rank() << " is not in the mesh";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const DTensor& t) { return os << t.describe(); }

Shape DTensor::local_offset() const {
  if (!mesh_.defined() || !mesh_.is_member()) return Shape(shape_.size(), 0);
  return global_offset(shape_, mesh_.shape(), spec_, mesh_.coordinate());
}

}  // namespace dt
