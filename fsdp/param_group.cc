// The FSDP engine (fsdp/param_group.h).
#include "fsdp/param_group.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "collectives/host_window.h"
#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "core/memory_stats.h"
#include "core/stream.h"
#include "dtensor/ops.h"
#include "fsdp/layout.h"
#include "kernels/chunk_cat.h"
#include "kernels/ops/elementwise.h"
#include "placement/layout.h"

namespace dt::fsdp {

namespace {

using Clock = std::chrono::steady_clock;

std::mutex g_stats_mu;
CommStats g_stats;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A collective in flight, timed for CommStats: issue to the first time it is seen complete.
struct Pending {
  WorkPtr work;
  Clock::time_point issued;
  bool seen_done = false;

  void start(WorkPtr w, int64_t bytes, int64_t CommStats::*counter) {
    work = std::move(w);
    issued = Clock::now();
    seen_done = false;
    std::lock_guard<std::mutex> lock(g_stats_mu);
    ++(g_stats.*counter);
    g_stats.bytes += bytes;
  }
  bool active() const { return work != nullptr; }
  // Notes the completion time when the work finished meanwhile (called at every engine call: cheap).
  void poll() {
    if (!work || seen_done || !work->is_completed()) return;
    seen_done = true;
    std::lock_guard<std::mutex> lock(g_stats_mu);
    g_stats.issued_s += seconds_since(issued);
  }
  // Orders `stream` after the collective (host backends: waits; the blocked time counts as exposed) and rethrows
  // the collective's error.
  void finish(Stream stream, const Device& device) {
    if (!work) return;
    poll();
    const auto t0 = Clock::now();
    const bool was_done = seen_done;
    WorkPtr w = std::move(work);
    work = nullptr;
    w->wait_stream(stream, device);
    const double blocked = seconds_since(t0);
    std::lock_guard<std::mutex> lock(g_stats_mu);
    g_stats.exposed_s += blocked;
    if (!was_done) g_stats.issued_s += seconds_since(issued);
  }
};

// Note [FSDP streams]
// On CUDA the engine queues its copy-ins and collectives on two streams of its own per device (all-gather,
// reduce-scatter), made once and shared by every group, so a group's all-gather and another's reduce-scatter overlap
// each other and the compute on the caller's stream (the legacy default stream, where dtensor's ops run). Ordering
// is by events only: unshard records an event on the caller's stream (the shards are as the optimizer left them)
// that the all-gather stream waits for; wait_for_unshard makes the caller's stream wait for the collective
// (Work::wait_stream) and copies out there; reduce_grads records an event after the gradients' producers that the
// reduce-scatter stream waits for; wait_for_reduce makes the caller's stream wait for the reduction. The host never
// waits for the device. Buffers used on the engine's streams are recorded with the allocator (record_stream), so
// that freeing them on the host never hands them out while that work runs (Note [Stream-safe frees]). On the CPU
// the streams are null, events are no-ops and wait_stream waits: the same code.
struct EngineStreams {
  Stream all_gather, reduce_scatter;
};

EngineStreams engine_streams(const Device& device) {
  if (!device.is_cuda()) return {};
  static std::mutex mu;
  static std::map<int, EngineStreams> streams;  // made once per device, for the process's lifetime
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device.index);
  if (it == streams.end())
    it = streams.emplace(device.index, EngineStreams{create_stream(device), create_stream(device)}).first;
  return it->second;
}

// Declares that work on `stream` uses t's memory (no-op on the CPU and for the default stream).
void record_use(const Tensor& t, Stream stream) {
  if (t.defined() && t.storage() && stream.handle && t.device().is_cuda())
    allocator_for(t.device()).record_stream(t.storage()->data(), stream);
}

}  // namespace

CommStats comm_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  return g_stats;
}

void reset_comm_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mu);
  g_stats = CommStats{};
}

struct ParamGroup::Impl {
  GroupLayout layout;
  std::vector<std::shared_ptr<Storage>> storages;  // the unsharded parameters' stable storages
  std::vector<DTensor> unsharded;
  Tensor gathered;  // the all-gather buffer (S slots of layout.slot_bytes), while unsharding
  Tensor kept;      // the post-forward share (S/k slots), between a post-forward reshard and the next unshard
  Pending gather;
  bool segmented =
      false;  // the gather in flight writes straight into the storages (Note [Gathering into the parameters])
  EngineStreams streams;
  CommunicatorPtr shard_comm, replicate_comm, post_forward_comm;
  // Gradients.
  std::vector<DTensor> acc;            // accumulated unsharded gradients (reduce dtype, the unsharded layout)
  std::vector<Tensor> reduce_out;      // one per reduce class
  std::vector<Tensor> reduce_in;       // kept alive while the reduce-scatter runs
  std::vector<Tensor> reduce_sources;  // the gradients a segmented reduce-scatter reads, likewise
  std::vector<Pending> reduces;        // per reduce class: the reduce-scatter, then (HSDP) the all-reduce
  std::vector<bool> reduced_has_grad;
  std::vector<DTensor> sharded_grads;
  // Note [Gathering by mapping]: the window holding this rank's mapped shards, which parameters it maps, and the
  // token each unshard gathers in their place (this rank's count of unshards, sent; every rank's, received).
  std::shared_ptr<HostWindow> window;
  std::vector<bool> mapped;
  // The segmented all-gather's block: each parameter's offset in it and its size (the slot's, or with a window only
  // the parameters it does not map, packed, and the token).
  std::vector<int64_t> block_offset;
  int64_t block_bytes = 0;
  int64_t unshards = 0;
  std::vector<int64_t> tokens;
};

ParamGroup::ParamGroup(std::string name, std::vector<std::string> names, const std::vector<DTensor>& params,
                       const DeviceMesh& mesh, const FsdpOptions& options)
    : name_(std::move(name)), mesh_(mesh), options_(options), names_(std::move(names)), impl_(new Impl) {
  DT_CHECK_ARG(names_.size() == params.size(), "fsdp: ", params.size(), " parameters but ", names_.size(), " names");
  Impl& m = *impl_;
  m.layout = make_group_layout(names_, params, mesh_, options_);
  m.streams = engine_streams(mesh_.device());
  m.shard_comm = mesh_.comm(mesh_.ndim() - 1);
  if (mesh_.ndim() == 2) m.replicate_comm = mesh_.comm(0);
  if (const int64_t* k = std::get_if<int64_t>(&options_.reshard_after_forward)) {
    // Ranks k*g .. k*g + k - 1 of the shard dim gather together after a post-forward reshard.
    const int r = m.shard_comm->rank();
    m.post_forward_comm = m.shard_comm->split(r / int(*k), r % int(*k));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamLayout& p = m.layout.params[i];
    {
      MemoryKindScope kind(MemoryKind::kParameters);
      params_.push_back(make_shard(params[i], p, options_.offload_policy.cpu_offload));
    }
    // The stable storage of the gathered value: allocated now, released until the first unshard.
    MemoryKindScope kind(MemoryKind::kUnshardedParameters);
    auto storage = Storage::create(size_t(p.unsharded_numel()) * dtype_size(p.param_dtype), mesh_.device());
    storage->release();
    m.storages.push_back(storage);
    Tensor local(storage, p.unsharded_local_shape, contiguous_strides(p.unsharded_local_shape), 0, p.param_dtype);
    m.unsharded.push_back(DTensor::from_local_unchecked(local, p.orig_mesh, p.orig_spec, p.global_shape));
  }
  m.acc.resize(params.size());
  m.sharded_grads.resize(params.size());
  m.mapped.assign(params.size(), false);
  for (const ParamLayout& p : m.layout.params) m.block_offset.push_back(p.slot_byte_offset);
  m.block_bytes = m.layout.slot_bytes;
  map_shards();
}

// Note [Gathering by mapping]
// On one host a gathered parameter need not be a copy: every rank keeps its shard of the parameter in a HostWindow
// (collectives/host_window.h), and the parameter's unsharded storage is an address range that maps rank r's shard
// at rank r's rows, for every r, this rank's own included. An unshard then moves none of its bytes, and a reshard
// frees nothing: the range is the shards' own memory. The range stays mapped for the group's lifetime, so the storage
// keeps its address and no page is faulted in after the first step. The all-gather still carries:
//   - the parameters that cannot be mapped: a shard that is not a whole number of pages on every rank but the last
//     (biases, norms). A group that casts to a param_dtype, offloads, or keeps a post-forward share
//     (reshard_after_forward = k) keeps the copying path whole, as does any group on a GPU;
//   - a token per rank, the count of this group's unshards. The all-gather completes only once every rank has
//     started it, that is, has finished what it wrote to its shards before (the optimizer step, a checkpoint load),
//     so the ranges read every shard as of this unshard. A rank whose count differs fails the wait, named.
// The peers' pages are live, not a snapshot: a rank that writes its shards between a peer's unshard and that peer's
// reshard changes what the peer computes with. The engine's order keeps clear of it: a rank steps its optimizer
// only after the reduce-scatter of every group, which needs every peer's gradients, which a peer sends only once its
// backward through the group (its last read) is done. After reshard a mapped parameter stays readable (it shows the
// shards' current values) where a copied one fails as a released storage. The window is made with the group, a
// collective over the shard dim that decides the same on every rank; DT_FSDP_MAP_SHARDS=0 turns it off.
void ParamGroup::map_shards() {
  Impl& m = *impl_;
  const GroupLayout& L = m.layout;
  const Device dev = mesh_.device();
  if (dev.is_cuda() || L.shard_size < 2 || m.post_forward_comm || options_.offload_policy.cpu_offload ||
      !m.shard_comm->supports_segments(dev))
    return;
  for (const ParamLayout& p : L.params)
    if (p.orig_dtype != p.param_dtype) return;
  const int64_t page = HostWindow::page_bytes();
  std::vector<HostWindow::RangeSpec> ranges;
  std::vector<size_t> which;
  std::vector<int64_t> offsets;
  int64_t window_bytes = 0;
  for (size_t i = 0; i < L.params.size(); ++i) {
    const ParamLayout& p = L.params[i];
    const int64_t row_bytes = p.row_numel * int64_t(dtype_size(p.param_dtype));
    if (p.unsharded_numel() == 0 || (p.chunk * row_bytes) % page != 0) continue;
    HostWindow::RangeSpec range{p.unsharded_numel() * int64_t(dtype_size(p.param_dtype)), {}};
    for (int64_t r = 0; r < L.shard_size; ++r) {
      const IndexRange rows = p.rows_of(r);
      if (rows.size() > 0)
        range.pieces.push_back({int(r), window_bytes, rows.size() * row_bytes, rows.begin * row_bytes});
    }
    ranges.push_back(std::move(range));
    which.push_back(i);
    offsets.push_back(window_bytes);
    window_bytes += p.chunk * row_bytes;
  }
  if (which.empty()) return;
  m.window = HostWindow::create(*m.shard_comm, window_bytes, ranges, config::get_bool(config::Var::kFsdpMapShards));
  if (!m.window) return;
  const std::shared_ptr<HostWindow> w = m.window;
  for (size_t k = 0; k < which.size(); ++k) {
    const size_t i = which[k];
    const ParamLayout& p = L.params[i];
    // The shard moves into the window (the pool's copy is freed); its bytes stay charged to the parameters.
    const Tensor old = params_[i].to_local().contiguous();
    const int64_t n = int64_t(old.nbytes());
    uint8_t* at = w->local() + offsets[k];
    if (n > 0) std::memcpy(at, old.data_ptr(), size_t(n));
    std::shared_ptr<Storage> shard;
    {
      MemoryKindScope kind(MemoryKind::kParameters);
      count_memory(dev, MemoryKind::kParameters, n);
      shard = Storage::wrap(at, size_t(n), dev, [w, dev, n](void*) { count_memory(dev, MemoryKind::kParameters, -n); });
    }
    const Shape& shape = p.sharded_local_shape;
    params_[i] = DTensor::from_local_unchecked(Tensor(shard, shape, contiguous_strides(shape), 0, old.dtype()),
                                               params_[i].mesh(), params_[i].spec(), params_[i].shape());
    // The unsharded value: the range (no memory of its own, so nothing is charged).
    auto storage =
        Storage::wrap(w->range(k), size_t(p.unsharded_numel()) * dtype_size(p.param_dtype), dev, [w](void*) {});
    m.storages[i] = storage;
    Tensor local(storage, p.unsharded_local_shape, contiguous_strides(p.unsharded_local_shape), 0, p.param_dtype);
    m.unsharded[i] = DTensor::from_local_unchecked(local, p.orig_mesh, p.orig_spec, p.global_shape);
    m.mapped[i] = true;
  }
  // The all-gather's block packs the rest, then the token.
  m.block_bytes = 0;
  for (size_t i = 0; i < L.params.size(); ++i) {
    m.block_offset[i] = m.block_bytes;
    if (!m.mapped[i]) m.block_bytes += L.params[i].padded_numel * int64_t(dtype_size(L.params[i].param_dtype));
  }
  m.block_bytes += int64_t(sizeof(int64_t));
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

const std::string& ParamGroup::param_name(size_t i) const { return names_.at(i); }
const DTensor& ParamGroup::sharded_param(size_t i) const { return params_.at(i); }
const DTensor& ParamGroup::unsharded_param(size_t i) const { return impl_->unsharded.at(i); }
bool ParamGroup::is_mapped(size_t i) const { return impl_->mapped.at(i); }

int64_t ParamGroup::sharded_bytes() const {
  int64_t n = 0;
  for (const DTensor& p : params_) n += int64_t(p.to_local().nbytes());
  return n;
}

int64_t ParamGroup::unsharded_grad_bytes() const {
  int64_t n = 0;
  for (const ParamLayout& p : impl_->layout.params)
    if (is_floating(p.reduce_dtype)) n += p.unsharded_numel() * int64_t(dtype_size(p.reduce_dtype));
  return n;
}

int64_t ParamGroup::gather_buffer_bytes() const { return impl_->layout.shard_size * impl_->layout.slot_bytes; }

int64_t ParamGroup::reduce_buffer_bytes() const {
  int64_t n = 0;
  for (const ReduceClass& rc : impl_->layout.reduce_classes)
    n += impl_->layout.shard_size * rc.slot_numel * int64_t(dtype_size(rc.dtype));
  return n;
}

int64_t ParamGroup::unsharded_bytes() const {
  int64_t n = 0;
  for (const ParamLayout& p : impl_->layout.params) n += p.unsharded_numel() * int64_t(dtype_size(p.param_dtype));
  return n;
}

// ---- unshard ----

// Note [Gathering into the parameters]
// On a host, copy-in and copy-out each move as many bytes as the collective: the all-gather's two and the
// reduce-scatter's copy-in were 15 % of a rank's samples in a 2-process FSDP step of the MLP benchmark at batch 2
// (perf: split_copy, chunk_cat). When the shard communicator takes segmented blocks (Note [Segmented blocks] in
// collectives/communicator.h; UCX and threads on the CPU) the group's collectives take the rows where they lie:
//   - unshard: all_gather_segments. This rank's block is its shards, each at its region of the slot (the shards
//     themselves when they are already param_dtype on the group's device, else one slot staged by copy-in), and
//     rank r's block lands with every parameter's rows of r at their place in the parameter's storage, which is
//     sized at unshard: the padding never reaches a parameter, and no copy-out runs.
//   - reduce_grads: reduce_scatter_segments. Block r is every member's gradient rows of r (a member without a
//     gradient: an empty segment, read as zeros); the output is the flat shard buffer as before. The gradients stay
//     alive until wait_for_reduce. A pre-division (f16) scales a flat copy, so it keeps copy-in.
// Between processes of one host both read the peers' memory directly (process_vm_readv). The shards and the
// gradients must stay unchanged until the wait (the engine's own calls keep to that: reshard, the next unshard and
// the next reduction wait first). The post-forward share (reshard_after_forward = k) keeps the flat path.
bool ParamGroup::shards_are_the_slot() const {
  const Device dev = mesh_.device();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& shard = params_[i].to_local();
    if (!(shard.device() == dev) || shard.dtype() != impl_->layout.params[i].param_dtype || !shard.is_contiguous())
      return false;
  }
  return true;
}

void ParamGroup::copy_in(uint8_t* slot, Stream stream) {
  const GroupLayout& L = impl_->layout;
  const Device dev = mesh_.device();
  for (const SlotRun& run : L.runs) {
    std::vector<kernels::StridedView> in;
    std::vector<int64_t> padded;
    std::vector<Tensor> staged;  // cpu_offload: the host shards, copied to the device first
    for (size_t i = run.first; i < run.last; ++i) {
      const Tensor& shard = params_[i].to_local();
      if (!(shard.device() == dev)) {
        staged.push_back(shard.to(dev, stream));
        record_use(staged.back(), stream);
      } else {
        record_use(shard, stream);
      }
      in.push_back(kernels::view_of(shard.device() == dev ? shard : staged.back()));
      padded.push_back(L.params[i].padded_numel);
    }
    kernels::chunk_cat(in, slot + run.byte_offset, run.dtype, padded, dev, stream);
  }
}

void ParamGroup::unshard(bool async) {
  Impl& m = *impl_;
  if (state_ == State::kUnsharded) return;
  if (state_ == State::kUnsharding) {
    if (!async) wait_for_unshard();
    return;
  }
  const GroupLayout& L = m.layout;
  const int64_t S = L.shard_size;
  const Device dev = mesh_.device();
  const Stream ag = m.streams.all_gather;
  // The shards (or the kept share) as the caller's stream left them (Note [FSDP streams]).
  Event::record(dev, Stream{}).block(ag);
  if (state_ == State::kPostForward) {
    m.segmented = false;
    {
      MemoryKindScope kind(MemoryKind::kCommBuffers);
      m.gathered = Tensor::empty({S * L.slot_bytes}, DType::u8, dev);
    }
    record_use(m.gathered, ag);
    // This rank kept S/k slots: gathering them over its k ranks restores all S slots in order.
    const int64_t share = int64_t(m.kept.numel());
    record_use(m.kept, ag);
    m.gather.start(m.post_forward_comm->all_gather(m.kept.data_ptr(), m.gathered.data_ptr(), share, DType::u8, dev, ag),
                   share, &CommStats::all_gathers);
  } else if (m.shard_comm->supports_segments(dev)) {
    // Note [Gathering into the parameters]
    m.segmented = true;
    for (size_t i = 0; i < L.params.size(); ++i)
      if (!m.mapped[i])
        m.storages[i]->resize(size_t(L.params[i].unsharded_numel()) * dtype_size(L.params[i].param_dtype));
    std::vector<Segment> send;
    if (shards_are_the_slot()) {
      for (size_t i = 0; i < L.params.size(); ++i) {
        if (m.mapped[i]) continue;  // Note [Gathering by mapping]
        const Tensor& shard = params_[i].to_local();
        send.push_back(Segment{m.block_offset[i], int64_t(shard.nbytes()), shard.data_ptr()});
      }
    } else {
      DT_ASSERT(!m.window, "fsdp: group ", name_, " maps shards that are not its all-gather slot");
      {
        MemoryKindScope kind(MemoryKind::kCommBuffers);
        m.gathered = Tensor::empty({L.slot_bytes}, DType::u8, dev);
      }
      copy_in(static_cast<uint8_t*>(m.gathered.data_ptr()), ag);
      send.push_back(Segment{0, L.slot_bytes, m.gathered.data_ptr()});
    }
    std::vector<std::vector<Segment>> recv(static_cast<size_t>(S));
    for (int64_t r = 0; r < S; ++r) {
      for (size_t i = 0; i < L.params.size(); ++i) {
        if (m.mapped[i]) continue;
        const ParamLayout& p = L.params[i];
        const IndexRange rows = p.rows_of(r);
        const int64_t row_bytes = p.row_numel * int64_t(dtype_size(p.param_dtype));
        recv[size_t(r)].push_back(Segment{m.block_offset[i], rows.size() * row_bytes,
                                          static_cast<uint8_t*>(m.storages[i]->data()) + rows.begin * row_bytes});
      }
    }
    const int64_t block = m.block_bytes;
    if (m.window) {  // the token, at the block's end (Note [Gathering by mapping])
      const int64_t at = block - int64_t(sizeof(int64_t));
      ++m.unshards;
      m.tokens.assign(size_t(S), -1);
      send.push_back(Segment{at, int64_t(sizeof(int64_t)), &m.unshards});
      for (int64_t r = 0; r < S; ++r)
        recv[size_t(r)].push_back(Segment{at, int64_t(sizeof(int64_t)), &m.tokens[size_t(r)]});
    }
    int64_t sent = 0;  // what travels: the mapped parameters do not
    for (const Segment& g : send) sent += g.bytes;
    m.gather.start(m.shard_comm->all_gather_segments(std::move(send), block, std::move(recv), dev), sent,
                   &CommStats::all_gathers);
  } else {
    m.segmented = false;
    {
      MemoryKindScope kind(MemoryKind::kCommBuffers);
      m.gathered = Tensor::empty({S * L.slot_bytes}, DType::u8, dev);
    }
    record_use(m.gathered, ag);
    uint8_t* slot = static_cast<uint8_t*>(m.gathered.data_ptr()) + m.shard_comm->rank() * L.slot_bytes;
    copy_in(slot, ag);
    m.gather.start(m.shard_comm->all_gather(slot, m.gathered.data_ptr(), L.slot_bytes, DType::u8, dev, ag),
                   L.slot_bytes, &CommStats::all_gathers);
  }
  state_ = State::kUnsharding;
  if (!async) wait_for_unshard();
}

void ParamGroup::wait_for_unshard() {
  Impl& m = *impl_;
  if (state_ == State::kUnsharded) return;
  if (state_ != State::kUnsharding) unshard(/*async=*/true);
  m.gather.finish(Stream{}, mesh_.device());  // the copy-out below runs on the caller's stream, after the gather
  m.kept = Tensor();
  if (m.segmented) {  // gathered straight into the parameters
    m.gathered = Tensor();
    for (size_t r = 0; m.window && r < m.tokens.size(); ++r)
      DT_CHECK_ARG(m.tokens[r] == m.unshards, "fsdp: group ", name_, " was unsharded ", m.unshards,
                   " times on this rank but ", m.tokens[r], " times on rank ", m.shard_comm->global_ranks()[r],
                   " (every rank must unshard its groups in the same order)");
    state_ = State::kUnsharded;
    return;
  }
  // Copy-out: rank r's rows of parameter i sit at the start of its region in slot r.
  const GroupLayout& L = m.layout;
  for (size_t i = 0; i < L.params.size(); ++i)
    m.storages[i]->resize(size_t(L.params[i].unsharded_numel()) * dtype_size(L.params[i].param_dtype));
  for (int64_t r = 0; r < L.shard_size; ++r) {
    for (const SlotRun& run : L.runs) {
      std::vector<kernels::StridedView> out;
      std::vector<int64_t> padded;
      for (size_t i = run.first; i < run.last; ++i) {
        const ParamLayout& p = L.params[i];
        const IndexRange rows = p.rows_of(r);
        const Tensor& u = m.unsharded[i].to_local();
        out.push_back(kernels::view_of(u.view({-1}).narrow(0, rows.begin * p.row_numel, rows.size() * p.row_numel)));
        padded.push_back(p.padded_numel);
      }
      kernels::split_copy(static_cast<const uint8_t*>(m.gathered.data_ptr()) + r * L.slot_bytes + run.byte_offset,
                          run.dtype, padded, out, mesh_.device());
    }
  }
  m.gathered = Tensor();
  state_ = State::kUnsharded;
}

// ---- reshard ----

void ParamGroup::reshard(bool post_forward) {
  Impl& m = *impl_;
  if (state_ == State::kSharded || state_ == State::kPostForward) return;
  if (state_ == State::kUnsharding) wait_for_unshard();  // the buffers are the collective's until it finishes
  const GroupLayout& L = m.layout;
  if (post_forward && m.post_forward_comm) {
    // Keep slots [j*S/k, (j+1)*S/k) of the gathered layout, j = this rank's index among its k ranks.
    const int64_t per = L.shard_size / m.post_forward_comm->size();
    const int64_t first = m.post_forward_comm->rank() * per;
    {
      MemoryKindScope kind(MemoryKind::kUnshardedParameters);
      m.kept = Tensor::empty({per * L.slot_bytes}, DType::u8, mesh_.device());
    }
    for (int64_t t = 0; t < per; ++t) {
      for (const SlotRun& run : L.runs) {
        std::vector<kernels::StridedView> in;
        std::vector<int64_t> padded;
        for (size_t i = run.first; i < run.last; ++i) {
          const ParamLayout& p = L.params[i];
          const IndexRange rows = p.rows_of(first + t);
          in.push_back(kernels::view_of(
              m.unsharded[i].to_local().view({-1}).narrow(0, rows.begin * p.row_numel, rows.size() * p.row_numel)));
          padded.push_back(p.padded_numel);
        }
        kernels::chunk_cat(in, static_cast<uint8_t*>(m.kept.data_ptr()) + t * L.slot_bytes + run.byte_offset, run.dtype,
                           padded, mesh_.device());
      }
    }
    state_ = State::kPostForward;
  } else {
    state_ = State::kSharded;
  }
  for (size_t i = 0; i < m.storages.size(); ++i)
    if (!m.mapped[i]) m.storages[i]->release();
}

// ---- gradients ----

void ParamGroup::accumulate_grad(size_t i, const DTensor& grad) {
  Impl& m = *impl_;
  DT_CHECK_ARG(i < params_.size(), "fsdp: parameter index ", i, " out of range for group ", name_, " of ",
               params_.size());
  m.gather.poll();
  const ParamLayout& p = m.layout.params[i];
  const DTensor& u = m.unsharded[i];
  DT_CHECK_ARG(grad.shape() == p.global_shape, "fsdp: the gradient of ", names_[i], " has shape ",
               shape_str(grad.shape()), ", the parameter ", shape_str(p.global_shape));
  DTensor g = grad;
  // Cast first: the tensor-parallel reduction of a Partial gradient runs in the reduce dtype too.
  if (g.dtype() != p.reduce_dtype) g = to(g, p.reduce_dtype);
  if (!(g.mesh() == u.mesh()) || !(g.spec() == u.spec()))
    g = g.mesh() == u.mesh() ? g.redistribute(u.spec()) : g.redistribute(u.mesh(), u.placements());
  if (m.acc[i].defined()) {
    m.acc[i] = add(m.acc[i], g);
  } else {
    m.acc[i] = g;
  }
  if (const auto& st = m.acc[i].to_local().storage()) st->set_memory_kind(MemoryKind::kGradients);
}

void ParamGroup::reduce_grads() {
  Impl& m = *impl_;
  if (!sync_grads_) return;  // accumulate unsharded until a backward with sync
  bool any = false;
  for (const DTensor& a : m.acc) any = any || a.defined();
  if (!any) return;
  wait_for_reduce();  // one reduction of a group in flight at a time
  const GroupLayout& L = m.layout;
  const int64_t S = L.shard_size;
  const Device dev = mesh_.device();
  const Stream rs = m.streams.reduce_scatter;
  m.reduced_has_grad.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) m.reduced_has_grad[i] = m.acc[i].defined();
  m.reduce_in.assign(L.reduce_classes.size(), Tensor());
  m.reduce_out.assign(L.reduce_classes.size(), Tensor());
  m.reduces.assign(L.reduce_classes.size(), Pending{});
  // Segmented blocks read the gradients where they lie; a pre-division scales a flat copy.
  const bool segmented = m.shard_comm->supports_segments(dev) && L.pre_divide == 1;
  for (size_t c = 0; c < L.reduce_classes.size(); ++c) {
    const ReduceClass& rc = L.reduce_classes[c];
    const ReduceOp op = L.average_in_collective ? ReduceOp::kAvg : ReduceOp::kSum;
    Tensor out;
    {
      MemoryKindScope kind(MemoryKind::kGradients);
      out = Tensor::empty({rc.slot_numel}, rc.dtype, dev);
    }
    m.reduce_out[c] = out;
    if (segmented) {
      // Note [Gathering into the parameters], the reduction's half: block r is every member's rows of r, read where
      // the gradients lie (a member without a gradient: an empty segment, read as zeros).
      const int64_t es = int64_t(dtype_size(rc.dtype));
      std::vector<std::vector<Segment>> send(static_cast<size_t>(S));
      int64_t offset = 0;
      for (size_t i : rc.members) {
        const ParamLayout& p = L.params[i];
        Tensor src;
        if (m.acc[i].defined()) {
          src = m.acc[i].to_local().contiguous();
          m.reduce_sources.push_back(src);
        }
        for (int64_t r = 0; r < S; ++r) {
          const IndexRange rows = p.rows_of(r);
          const int64_t bytes = src.defined() ? rows.size() * p.row_numel * es : 0;
          send[size_t(r)].push_back(
              Segment{offset * es, bytes,
                      bytes ? static_cast<uint8_t*>(src.data_ptr()) + rows.begin * p.row_numel * es : nullptr});
        }
        offset += p.reduce_padded_numel;
      }
      m.reduces[c].start(
          m.shard_comm->reduce_scatter_segments(std::move(send), out.data_ptr(), rc.slot_numel, rc.dtype, op, dev),
          S * rc.slot_numel * es, &CommStats::reduce_scatters);
      continue;
    }
    Tensor in;
    {
      MemoryKindScope kind(MemoryKind::kCommBuffers);
      in = Tensor::empty({S * rc.slot_numel}, rc.dtype, dev);
    }
    // Copy-in: slot r holds every parameter's rows of rank r, padded; a parameter without a gradient gives zeros.
    std::vector<Tensor> sources;  // per member: the flat unsharded gradient
    for (size_t i : rc.members) {
      const ParamLayout& p = L.params[i];
      sources.push_back(m.acc[i].defined() ? m.acc[i].to_local().contiguous().view({-1})
                                           : Tensor::zeros({p.unsharded_numel()}, rc.dtype, dev));
    }
    // After the gradients' producers on the caller's stream (Note [FSDP streams]).
    Event::record(dev, Stream{}).block(rs);
    record_use(in, rs);
    for (const Tensor& t : sources) record_use(t, rs);
    for (int64_t r = 0; r < S; ++r) {
      std::vector<kernels::StridedView> views;
      std::vector<int64_t> padded;
      for (size_t k = 0; k < rc.members.size(); ++k) {
        const ParamLayout& p = L.params[rc.members[k]];
        const IndexRange rows = p.rows_of(r);
        views.push_back(kernels::view_of(sources[k].narrow(0, rows.begin * p.row_numel, rows.size() * p.row_numel)));
        padded.push_back(p.reduce_padded_numel);
      }
      kernels::chunk_cat(views,
                         static_cast<uint8_t*>(in.data_ptr()) + r * rc.slot_numel * int64_t(dtype_size(rc.dtype)),
                         rc.dtype, padded, dev, rs);
    }
    if (L.pre_divide != 1) {
      Tensor scaled = kernels::mul_scalar(in, 1.0 / L.pre_divide, rs);
      record_use(scaled, rs);
      in.copy_(scaled, rs);
    }
    record_use(out, rs);
    m.reduces[c].start(
        m.shard_comm->reduce_scatter(in.data_ptr(), out.data_ptr(), rc.slot_numel, rc.dtype, op, dev, rs),
        S * rc.slot_numel * int64_t(dtype_size(rc.dtype)), &CommStats::reduce_scatters);
    m.reduce_in[c] = in;
  }
  for (DTensor& a : m.acc) a = DTensor();
}

void ParamGroup::wait_for_reduce() {
  Impl& m = *impl_;
  if (m.reduces.empty()) return;
  const GroupLayout& L = m.layout;
  const Device dev = mesh_.device();
  for (size_t c = 0; c < m.reduces.size(); ++c) {
    const ReduceClass& rc = L.reduce_classes[c];
    const Stream rs = m.streams.reduce_scatter;
    if (m.replicate_comm && m.replicate_comm->size() > 1) {
      // HSDP: the all-reduce over the replicate dim follows the reduce-scatter on the engine's stream.
      m.reduces[c].finish(rs, dev);
      const ReduceOp op = L.average_in_collective ? ReduceOp::kAvg : ReduceOp::kSum;
      m.reduces[c].start(m.replicate_comm->all_reduce(m.reduce_out[c].data_ptr(), m.reduce_out[c].data_ptr(),
                                                      rc.slot_numel, rc.dtype, op, dev, rs),
                         rc.slot_numel * int64_t(dtype_size(rc.dtype)), &CommStats::all_reduces);
    }
    m.reduces[c].finish(Stream{}, dev);  // the caller's stream (the optimizer) runs after the reduction
    m.reduce_in[c] = Tensor();
    Tensor& out = m.reduce_out[c];
    if (L.post_divide != 1) out.copy_(kernels::mul_scalar(out, 1.0 / L.post_divide));
    // The gradient shards: views of the output (a cast or an offload copies).
    MemoryKindScope kind(MemoryKind::kGradients);
    int64_t offset = 0;
    for (size_t i : rc.members) {
      const ParamLayout& p = L.params[i];
      if (m.reduced_has_grad[i]) {
        const Shape& shape = p.sharded_local_shape;
        Tensor g = out.narrow(0, offset, shape_numel(shape)).view(shape);
        const DTensor& sp = params_[i];
        if (g.dtype() != sp.dtype()) g = g.to(sp.dtype());
        if (!(sp.to_local().device() == g.device())) g = g.to(sp.to_local().device());
        m.sharded_grads[i] = DTensor::from_local_unchecked(g, sp.mesh(), sp.spec(), sp.shape());
      }
      offset += p.reduce_padded_numel;
    }
    out = Tensor();
  }
  m.reduces.clear();
  m.reduce_sources.clear();
}

int64_t ParamGroup::grads_received() const {
  int64_t n = 0;
  for (const DTensor& a : impl_->acc) n += a.defined();
  return n;
}

bool ParamGroup::reduce_pending() const { return !impl_->reduces.empty(); }

const DTensor& ParamGroup::sharded_grad(size_t i) const { return impl_->sharded_grads.at(i); }

std::vector<DTensor> ParamGroup::take_sharded_grads() {
  std::vector<DTensor> out(params_.size());
  std::swap(out, impl_->sharded_grads);
  return out;
}

}  // namespace dt::fsdp
