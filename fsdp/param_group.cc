// The FSDP engine (fsdp/param_group.h): the state machine, the ordering against the caller's stream, the waits and
// the errors. What each parameter holds is fsdp/param.h; how the bytes move, fsdp/data_path.h.
#include "fsdp/param_group.h"

#include "core/error.h"
#include "core/memory_stats.h"
#include "core/stream.h"
#include "core/trace.h"
#include "fsdp/data_path.h"
#include "fsdp/flat_path.h"
#include "fsdp/layout.h"
#include "kernels/ops/elementwise.h"

namespace dt::fsdp {

namespace {

using Clock = CommObserver::Clock;

// A collective in flight, timed for the attached observer (fsdp/comm_observer.h): issue to the first time it is
// seen complete. Without an observer at its issue nothing is timed (the clock is read per collective otherwise).
struct Pending {
  WorkPtr work;
  CommKind kind = CommKind::kAllGather;
  Clock::time_point issued;
  bool timed = false;
  bool seen_done = false;

  void start(Issued w, CommKind k) {
    work = std::move(w.work);
    kind = k;
    seen_done = false;
    CommObserver* o = comm_observer();
    timed = o != nullptr;
    if (!timed) return;
    issued = Clock::now();
    o->issued(kind, w.bytes);
  }
  bool active() const { return work != nullptr; }
  // Notes the completion time when the work finished meanwhile (called at every engine call: cheap).
  void poll() {
    if (!work || seen_done || !work->is_completed()) return;
    seen_done = true;
    if (CommObserver* o = timed ? comm_observer() : nullptr) o->completed(kind, issued, Clock::now());
  }
  // Orders `stream` after the collective (host backends: waits; the blocked time counts as exposed) and rethrows
  // the collective's error.
  void finish(Stream stream, const Device& device) {
    if (!work) return;
    poll();
    CommObserver* o = timed ? comm_observer() : nullptr;
    const auto t0 = o ? Clock::now() : Clock::time_point{};
    const bool was_done = seen_done;
    WorkPtr w = std::move(work);
    work = nullptr;
    w->wait_stream(stream, device);
    if (o != nullptr && (o = comm_observer()) != nullptr) {
      const auto t1 = Clock::now();
      o->waited(t0, t1);
      if (!was_done) o->completed(kind, issued, t1);
    }
  }
};

}  // namespace

struct ParamGroup::Impl {
  GroupData g;
  std::unique_ptr<DataPath> gather_path, reduce_path;  // from the table (fsdp/data_path_table.cc)
  std::unique_ptr<FlatPath> share_path;                // reshard_after_forward = k: the post-forward share
  DataPath* gathering = nullptr;                       // the path of the gather in flight
  Pending gather;
  std::vector<Tensor> reduce_out;  // one per reduce class
  std::vector<Pending> reduces;    // per reduce class: the reduce-scatter, then (HSDP) the all-reduce
};

ParamGroup::ParamGroup(std::string name, std::vector<std::string> names, const std::vector<DTensor>& params,
                       const DeviceMesh& mesh, const FsdpOptions& options)
    : name_(std::move(name)), mesh_(mesh), options_(options), names_(std::move(names)), impl_(new Impl) {
  DT_CHECK_ARG(names_.size() == params.size(), "fsdp: ", params.size(), " parameters but ", names_.size(), " names");
  GroupData& g = impl_->g;
  g.name = name_;
  g.layout = make_group_layout(names_, params, mesh_, options_);
  g.device = mesh_.device();
  g.streams = engine_streams(mesh_.device());
  g.cpu_offload = options_.offload_policy.cpu_offload;
  g.shard_comm = mesh_.comm(mesh_.ndim() - 1);
  if (mesh_.ndim() == 2) g.replicate_comm = mesh_.comm(0);
  if (const int64_t* k = std::get_if<int64_t>(&options_.reshard_after_forward)) {
    // Ranks k*g .. k*g + k - 1 of the shard dim gather together after a post-forward reshard.
    const int r = g.shard_comm->rank();
    g.post_forward_comm = g.shard_comm->split(r / int(*k), r % int(*k));
    impl_->share_path = std::make_unique<FlatPath>(g);
  }
  g.params.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    g.params.emplace_back(params[i], g.layout.params[i], g.device, g.cpu_offload);
  impl_->gather_path = select_data_path(g, Direction::kGather);
  impl_->reduce_path = select_data_path(g, Direction::kReduce);
}

ParamGroup::~ParamGroup() {
  // A collective still in flight writes into our buffers: let it finish (errors are not for a destructor).
  Impl& m = *impl_;
  try {
    if (m.gather.active()) m.gather.work->wait();
    for (Pending& p : m.reduces)
      if (p.active()) p.work->wait();
  } catch (...) {
  }
}

size_t ParamGroup::size() const { return impl_->g.params.size(); }
const std::string& ParamGroup::param_name(size_t i) const { return names_.at(i); }
const DTensor& ParamGroup::sharded_param(size_t i) const { return impl_->g.params.at(i).shard(); }
const DTensor& ParamGroup::unsharded_param(size_t i) const { return impl_->g.params.at(i).unsharded(); }
bool ParamGroup::is_mapped(size_t i) const { return impl_->g.params.at(i).mapped(); }

int64_t ParamGroup::sharded_bytes() const {
  int64_t n = 0;
  for (const Param& p : impl_->g.params) n += int64_t(p.shard().to_local().nbytes());
  return n;
}

int64_t ParamGroup::unsharded_grad_bytes() const {
  int64_t n = 0;
  for (const ParamLayout& p : impl_->g.layout.params)
    if (is_floating(p.reduce_dtype)) n += p.unsharded_numel() * int64_t(dtype_size(p.reduce_dtype));
  return n;
}

int64_t ParamGroup::gather_buffer_bytes() const { return impl_->g.layout.shard_size * impl_->g.layout.slot_bytes; }

int64_t ParamGroup::reduce_buffer_bytes() const {
  int64_t n = 0;
  for (const ReduceClass& rc : impl_->g.layout.reduce_classes)
    n += impl_->g.layout.shard_size * rc.slot_numel * int64_t(dtype_size(rc.dtype));
  return n;
}

int64_t ParamGroup::unsharded_bytes() const {
  int64_t n = 0;
  for (const ParamLayout& p : impl_->g.layout.params) n += p.unsharded_numel() * int64_t(dtype_size(p.param_dtype));
  return n;
}

namespace {

// One phase of a group as a span of category fsdp, named by the group (Note [The trace recorder]).
class PhaseSpan {
 public:
  PhaseSpan(const char* phase, const std::string& group) : span_(trace::Category::kFsdp, phase) {
    if (!span_.active()) return;
    trace::Deferred d;
    d.format = [](const int64_t* v, std::string& out) {
      out += "\"group\":";
      trace::append_string(out, trace::Deferred::name_at(v, 0));
    };
    d.push_name(trace::intern(group));  // one lookup: the group's name is interned once, then found
    span_.set_args(d);
  }

 private:
  trace::Span span_;
};

}  // namespace

// ---- unshard ----

void ParamGroup::unshard(bool async) {
  Impl& m = *impl_;
  if (state_ == State::kUnsharded) return;
  if (state_ == State::kUnsharding) {
    if (!async) wait_for_unshard();
    return;
  }
  PhaseSpan span("unshard", name_);
  // The shards (or the kept share) as the caller's stream left them (Note [FSDP streams]).
  Event::record(m.g.device, Stream{}).block(m.g.streams.all_gather);
  if (state_ == State::kPostForward) {
    m.gathering = m.share_path.get();
    m.gather.start(m.share_path->start_gather_share(), CommKind::kAllGather);
  } else {
    m.gathering = m.gather_path.get();
    m.gather.start(m.gather_path->start_gather(), CommKind::kAllGather);
  }
  state_ = State::kUnsharding;
  if (!async) wait_for_unshard();
}

void ParamGroup::wait_for_unshard() {
  Impl& m = *impl_;
  if (state_ == State::kUnsharded) return;
  PhaseSpan span("wait_unshard", name_);
  if (state_ != State::kUnsharding) unshard(/*async=*/true);
  m.gather.finish(Stream{}, m.g.device);  // the copy-out runs on the caller's stream, after the gather
  m.gathering->finish_gather();
  state_ = State::kUnsharded;
}

// ---- reshard ----

void ParamGroup::reshard(bool post_forward) {
  Impl& m = *impl_;
  if (state_ == State::kSharded || state_ == State::kPostForward) return;
  PhaseSpan span("reshard", name_);
  if (state_ == State::kUnsharding) wait_for_unshard();  // the buffers are the collective's until it finishes
  if (post_forward && m.share_path) {
    m.share_path->keep_share();
    state_ = State::kPostForward;
  } else {
    state_ = State::kSharded;
  }
  for (Param& p : m.g.params) p.release_unsharded();
}

// ---- gradients ----

void ParamGroup::accumulate_grad(size_t i, DTensor grad) {
  Impl& m = *impl_;
  DT_CHECK_ARG(i < m.g.params.size(), "fsdp: parameter index ", i, " out of range for group ", name_, " of ",
               m.g.params.size());
  m.gather.poll();
  m.g.params[i].accumulate_grad(std::move(grad));
}

void ParamGroup::reduce_grads() {
  Impl& m = *impl_;
  if (!sync_grads_) return;  // accumulate unsharded until a backward with sync
  bool any = false;
  for (const Param& p : m.g.params) any = any || p.has_grad();
  if (!any) return;
  wait_for_reduce();  // one reduction of a group in flight at a time
  PhaseSpan span("reduce_grads", name_);
  const GroupLayout& L = m.g.layout;
  for (Param& p : m.g.params) p.start_reduce();
  m.reduce_out.assign(L.reduce_classes.size(), Tensor());
  m.reduces.assign(L.reduce_classes.size(), Pending{});
  const ReduceOp op = L.average_in_collective ? ReduceOp::kAvg : ReduceOp::kSum;
  for (size_t c = 0; c < L.reduce_classes.size(); ++c) {
    const ReduceClass& rc = L.reduce_classes[c];
    {
      MemoryKindScope kind(MemoryKind::kGradients);
      m.reduce_out[c] = Tensor::empty({rc.slot_numel}, rc.dtype, m.g.device);
    }
    m.reduces[c].start(m.reduce_path->start_reduce(c, m.reduce_out[c], op), CommKind::kReduceScatter);
  }
  for (Param& p : m.g.params) p.drop_grad();
}

void ParamGroup::wait_for_reduce() {
  Impl& m = *impl_;
  if (m.reduces.empty()) return;
  PhaseSpan span("wait_reduce", name_);
  const GroupLayout& L = m.g.layout;
  const Device dev = m.g.device;
  const Stream rs = m.g.streams.reduce_scatter;
  for (size_t c = 0; c < m.reduces.size(); ++c) {
    const ReduceClass& rc = L.reduce_classes[c];
    Tensor& out = m.reduce_out[c];
    if (m.g.replicate_comm && m.g.replicate_comm->size() > 1) {
      // HSDP: the all-reduce over the replicate dim follows the reduce-scatter on the engine's stream.
      m.reduces[c].finish(rs, dev);
      const ReduceOp op = L.average_in_collective ? ReduceOp::kAvg : ReduceOp::kSum;
      m.reduces[c].start(
          {m.g.replicate_comm->all_reduce(out.data_ptr(), out.data_ptr(), rc.slot_numel, rc.dtype, op, dev, rs),
           rc.slot_numel * int64_t(dtype_size(rc.dtype))},
          CommKind::kAllReduce);
    }
    m.reduces[c].finish(Stream{}, dev);  // the caller's stream (the optimizer) runs after the reduction
    m.reduce_path->finish_reduce(c);
    if (L.post_divide != 1) out.copy_(kernels::mul_scalar(out, 1.0 / L.post_divide));
    // The gradient shards: views of the output (a cast or an offload copies).
    MemoryKindScope kind(MemoryKind::kGradients);
    int64_t offset = 0;
    for (size_t i : rc.members) {
      Param& p = m.g.params[i];
      if (p.has_reduced_grad()) {  // (built at once rather than as narrow and view: it runs per parameter and step)
        const Shape& shape = p.layout().sharded_local_shape;
        p.set_sharded_grad(Tensor(out.storage(), shape, contiguous_strides(shape), out.offset() + offset, out.dtype()));
      }
      offset += p.layout().reduce_padded_numel;
    }
    out = Tensor();
  }
  m.reduces.clear();
}

void ParamGroup::set_gradient_divide_factor(std::optional<double> factor) {
  FsdpOptions options = options_;
  options.gradient_divide_factor = factor;
  wait_for_reduce();
  set_gradient_division(impl_->g.layout, mesh_, options);  // a bad factor throws before it changes anything
  options_ = options;
  impl_->reduce_path = select_data_path(impl_->g, Direction::kReduce);  // a pre-division rules out some paths
}

int64_t ParamGroup::grads_received() const {
  int64_t n = 0;
  for (const Param& p : impl_->g.params) n += p.has_grad();
  return n;
}

bool ParamGroup::reduce_pending() const { return !impl_->reduces.empty(); }

const DTensor& ParamGroup::sharded_grad(size_t i) const { return impl_->g.params.at(i).sharded_grad(); }

std::vector<DTensor> ParamGroup::take_sharded_grads() {
  std::vector<DTensor> out;
  out.reserve(impl_->g.params.size());
  for (Param& p : impl_->g.params) out.push_back(p.take_sharded_grad());
  return out;
}

}  // namespace dt::fsdp
