// Communicator: moves bytes among the ranks of a group, as NCCL does. It knows nothing of placements.
//
// Every operation is collective over the group (send/recv excepted) and must be called in the same order on all
// ranks. Calls are asynchronous: they return a Work at once and make progress without the caller's help; the
// blocking forms are one line on top (`comm.all_reduce(...)->wait()`).
//
// Buffers are (pointer, count, dtype, device): counts are in elements. Layouts:
//   all_gather      send: count          recv: size*count, rank r's block at r*count
//                   in place when send == recv + rank*count*elem_size
//   reduce_scatter  send: size*count     recv: count (this rank's block r of the reduction)
//                   in place when recv == send + rank*count*elem_size
//   all_reduce      send: count          recv: count          in place when send == recv
//   broadcast       buf: count on every rank; root's values win
//   all_to_all      send: size*count     recv: size*count     block j of send goes to rank j
//   all_to_allv     per-peer counts and displacements (elements) on both sides
//   send / recv     point to point with a peer (matched in call order per peer); post every send and recv of an
//                   exchange before waiting on any of them (NCCL issues them together at the first wait)
//   *_views         strided views instead of buffers (see "strided views" below)
//   *_segments      blocks made of byte segments scattered over many buffers (see "segmented blocks" below)
// ReduceOp::kAvg divides the sum by the group size (integers: truncating, like ncclAvg).
//
// Note [Strided views]
// Redistributing a tensor sharded along an inner dim gathers blocks that are strided in the result (S(1) -> R) or
// sends strided blocks (S(0) -> S(1)). With contiguous buffers that costs a staging copy of the whole tensor on one
// side, which on a memory-bound host doubles the time of the collective. The *_views calls take the blocks as
// strided views instead: the UCX backend moves them between processes of one host with process_vm_readv over
// iovecs (the receiver reads the sender's rows straight into its own rows: one copy, as for contiguous data), the
// thread backend copies view to view. Backends without a direct path report supports_views() == false and callers
// stage (dtensor's transitions do).
//
// Note [Segmented blocks]
// FSDP gathers a group of parameters with one all-gather and reduces their gradients with one reduce-scatter: each
// rank's block is every parameter's rows of that rank, one after the other (padded), while the rows live in each
// parameter's (or gradient's) own storage. Through contiguous buffers that costs a copy into the flat buffer and,
// for the all-gather, a copy out of it, each as large as the data moved, on a host where memory bandwidth is the
// step's budget. The *_segments calls take the blocks as lists of byte segments instead: a segment is (offset in the
// block, bytes, address in this process).
//   all_gather_segments     this rank's send segments make up its block; its recv segments for rank j say where
//                           pieces of j's block go (bytes no recv segment names are dropped).
//   reduce_scatter_segments this rank's send segments for rank j make up its block j (count elements of dtype);
//                           this rank receives the reduction of every rank's block of it, contiguous.
// A block's bytes that no send segment covers read as zeros. The UCX backend moves segments between processes of
// one host with process_vm_readv from the sender's memory straight into the receiver's (Note [Direct segment reads]
// in collectives/ucx/segments.cc): no copy-in, no copy-out. Rules: every rank passes the same number of send
// segments per block; within a list, segments are sorted by offset and do not overlap (reduce_scatter: offsets and
// sizes are multiples of the element size); send segments stay unchanged, and recv memory untouched, until the call
// completes. Backends without a direct path report supports_segments() == false and callers stage through
// contiguous buffers.
//
// Note [One funnel]
// The public methods only marshal their arguments into CollectiveArgs and call submit(), the single function that
// validates (clear errors naming the call, the expected and the given values), notifies observers (communication
// counters), records the call in the communicator's flight recorder (collectives/flight_recorder.h) and hands it to
// the backend's enqueue(). Backends implement enqueue() and never re-validate. The debug signature check
// (DT_DEBUG_COLLECTIVES=1) is a wrapper communicator around a backend's (collectives/debug_communicator.h): its
// funnel validates and notifies observers, then its enqueue() checks and hands the call to the wrapped one's funnel.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/work.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "core/tensor.h"
#include "kernels/strided_view.h"

namespace dt {

class FlightRecorder;

enum class CollectiveKind : uint8_t {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kAllToAll,
  kAllToAllV,
  kSend,
  kRecv,
  kBarrier,
};
const char* collective_kind_name(CollectiveKind kind);

// A piece of a rank's block in this process's memory (Note [Segmented blocks]).
struct Segment {
  int64_t offset = 0;  // bytes into the block
  int64_t bytes = 0;
  void* data = nullptr;  // read for a send segment, written for a recv segment
};

struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;  // see the layouts above (per-rank block for all_gather / reduce_scatter / all_to_all)
  DType dtype = DType::f32;
  Device device = Device::cpu();
  ReduceOp op = ReduceOp::kSum;
  int root = 0;                                                             // broadcast root
  int peer = -1;                                                            // send / recv
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;  // all_to_allv
  Stream stream{};  // CUDA backends: the stream the caller's buffers are ordered on (null: the current stream)
  // Strided views (all_gather_views: one send view, one recv view per rank; all_to_all_views: one of each per rank).
  // When present they replace send/recv; count is the elements this rank sends (all_gather: its one block), and
  // send_counts / recv_counts hold the views' element counts.
  std::vector<kernels::StridedView> send_views, recv_views;
  // Segmented blocks (Note [Segmented blocks]). all_gather: one send list, one recv list per rank, dtype u8 and
  // count the bytes of a block; reduce_scatter: one send list per rank and the contiguous recv buffer. They replace
  // send (and the all-gather's recv).
  std::vector<std::vector<Segment>> send_segments, recv_segments;

  size_t elem_size() const { return dtype_size(dtype); }
  bool has_views() const { return !recv_views.empty(); }
  bool has_segments() const { return !send_segments.empty(); }
  bool in_place() const;
  // The bytes this rank's send (recv) buffer spans in a group of `group_size`, by the layouts above (all_to_allv:
  // up to the end of its last non-empty block; 0 for a side the call has no buffer on, and for strided views).
  int64_t send_bytes(int group_size) const;
  int64_t recv_bytes(int group_size) const;
  // The call's size by the benchmarks' convention, which CommCounter and the trace report: count elements (a
  // reduce-scatter's and an all-to-all's whole input: count per rank), views and segments included.
  int64_t input_bytes(int group_size) const;
  std::string describe() const;  // "all_reduce(count=1024, f32, sum)"
};

class Communicator {
 public:
  Communicator();
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;  // "thread", "ucx", "nccl"
  // Whether buffers on `device` can be passed to this communicator.
  virtual bool supports(const Device& device) const = 0;
  // The global ranks of this group's members, in group-rank order (for error messages naming peers).
  virtual std::vector<int> global_ranks() const = 0;
  // Splits the group: ranks with the same color form a new communicator ordered by (key, rank). color < 0 means
  // "not in any new group" (returns nullptr). Collective over this group.
  virtual std::shared_ptr<Communicator> split(int color, int key) = 0;
  // Whether the *_views calls accept buffers on `device` (Note [Strided views]).
  virtual bool supports_views(const Device& /*device*/) const { return false; }
  // Whether the *_segments calls accept buffers on `device` (Note [Segmented blocks]).
  virtual bool supports_segments(const Device& /*device*/) const { return false; }
  // The device this communicator's own metadata travels on (collectives/exchange.h): the CPU for host backends, the
  // communicator's GPU for NCCL, which accepts no host buffer.
  virtual Device home_device() const { return Device::cpu(); }
  // Deadline used by Work::wait() when no timeout is given.
  virtual Work::Duration timeout() const { return default_timeout(); }
  // Null while calls on this communicator can complete; otherwise the error a call would get now (a member died, the
  // group failed). For waits that are not collectives (a checkpoint commit polling files). A backend may check its
  // peers here (ucx: those on this host, through /proc, at most twice a second).
  virtual std::exception_ptr health() const { return nullptr; }

  // ---- pointer API ----
  WorkPtr all_gather(const void* send, void* recv, int64_t count, DType dtype, Device device, Stream stream = {});
  WorkPtr reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, Device device,
                         Stream stream = {});
  WorkPtr all_reduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op, Device device,
                     Stream stream = {});
  WorkPtr broadcast(void* buf, int64_t count, DType dtype, int root, Device device, Stream stream = {});
  WorkPtr all_to_all(const void* send, void* recv, int64_t count, DType dtype, Device device, Stream stream = {});
  WorkPtr all_to_allv(const void* send, std::vector<int64_t> send_counts, std::vector<int64_t> send_displs, void* recv,
                      std::vector<int64_t> recv_counts, std::vector<int64_t> recv_displs, DType dtype, Device device,
                      Stream stream = {});
  WorkPtr send(const void* buf, int64_t count, DType dtype, int peer, Device device, Stream stream = {});
  WorkPtr recv(void* buf, int64_t count, DType dtype, int peer, Device device, Stream stream = {});
  WorkPtr barrier();

  // ---- Tensor API (contiguous tensors; shapes checked against the layouts above) ----
  WorkPtr all_gather(const Tensor& input, Tensor& output);                   // output.numel() == size * input.numel()
  WorkPtr reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op);  // input.numel() == size * output.numel()
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op);                           // in place
  WorkPtr broadcast(Tensor& tensor, int root);
  WorkPtr all_to_all(const Tensor& input, Tensor& output);
  WorkPtr send(const Tensor& tensor, int peer);
  WorkPtr recv(Tensor& tensor, int peer);

  // ---- strided views (Note [Strided views]) ----
  // all_gather_views: `send` goes to every rank; recv[j] receives rank j's send view. all_to_all_views: send[j] goes
  // to rank j, recv[j] receives from rank j. Counts may differ per pair (uneven blocks, empty blocks) but must agree
  // pairwise; all views share one dtype; outputs must not overlap each other or the inputs.
  WorkPtr all_gather_views(const kernels::StridedView& send, std::vector<kernels::StridedView> recv, Device device);
  WorkPtr all_to_all_views(std::vector<kernels::StridedView> send, std::vector<kernels::StridedView> recv,
                           Device device);

  // ---- segmented blocks (Note [Segmented blocks]) ----
  // all_gather_segments: this rank's block of `block_bytes` bytes is made of `send`; recv[j] places the pieces of
  // rank j's block.
  WorkPtr all_gather_segments(std::vector<Segment> send, int64_t block_bytes, std::vector<std::vector<Segment>> recv,
                              Device device);
  // reduce_scatter_segments: send[j] makes up this rank's block j of `count` elements; `recv` (count elements)
  // receives the reduction of every rank's block of this rank.
  WorkPtr reduce_scatter_segments(std::vector<std::vector<Segment>> send, void* recv, int64_t count, DType dtype,
                                  ReduceOp op, Device device);

  // The funnel (Note [One funnel]). Public so that layers above can issue prepared arguments.
  WorkPtr submit(const CollectiveArgs& args);

  // The record of this communicator's last calls (quoted by the backends' timeout and abort errors).
  const std::shared_ptr<FlightRecorder>& flight_recorder() const { return recorder_; }

 protected:
  // Backends: start the (already validated) operation and return its Work.
  virtual WorkPtr enqueue(const CollectiveArgs& args) = 0;
  // Fault injection's "skip" (Note [Fault injection]): the call takes its number in the backend's sequence and does
  // nothing, as a lost call would. Backends without call numbers on the wire throw Unsupported.
  virtual void skip_call(const CollectiveArgs& args);
  // Group-wide calls submitted so far, this one included (the number a call has in its group).
  uint64_t call_sequence() const { return sequence_; }
  // For wrappers: this communicator's funnel validates and notifies observers, then enqueue() forwards; the calls
  // the wrapper makes meanwhile (on `inner`) are not observed again. It shares `inner`'s flight recorder, which
  // records them.
  void forward_to(const Communicator& inner);

 private:
  void name_for_trace();
  uint64_t sequence_ = 0;  // group-wide calls submitted on this communicator
  bool forwards_ = false;
  std::shared_ptr<FlightRecorder> recorder_;
};

using CommunicatorPtr = std::shared_ptr<Communicator>;

// The world communicator that layers above use when none is given (DeviceMesh::create, ...). Set by
// init_process_group(); per thread when set with this_thread_only (the thread backend runs one rank per thread),
// else process-wide.
void set_default_world(CommunicatorPtr world, bool this_thread_only = false);
CommunicatorPtr default_world();  // throws InvalidArgument when none was set
CommunicatorPtr default_world_or_null();

// Observers see every call that goes through a funnel in this process (communication counters, tracing).
struct CollectiveEvent {
  const Communicator* comm;
  const CollectiveArgs* args;
};
using CollectiveObserver = std::function<void(const CollectiveEvent&)>;
// Returns an id for remove_collective_observer(). Observers run on the calling thread, before enqueue().
int add_collective_observer(CollectiveObserver observer);
void remove_collective_observer(int id);

// Validation shared by submit() (exposed for tests): throws InvalidArgument naming the problem.
void validate_collective(const Communicator& comm, const CollectiveArgs& args);

}  // namespace dt
