// FlightRecorder: a communicator's record of its last calls (as c10d's flight recorder), quoted by the backends'
// timeout and abort errors so that a hang names what this rank did last:
//   "last calls on this rank: #41 all_reduce(count=4, f32, sum) completed, #42 all_gather(count=8, f32) pending
//    300.0 s"
//
// Note [Flight recorder cost]
// The funnel records every call (Communicator::submit), so the record is a fixed ring of kCapacity entries written
// in place: no allocation once constructed, one uncontended lock per record and one per completion (the readers are
// error paths). The Work tells the recorder when it finished (Work::set_record), so an entry knows its final state
// even after the caller released the Work.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/call_signature.h"
#include "core/trace.h"

namespace dt {

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 64;
  using Clock = std::chrono::steady_clock;
  enum class State : uint8_t { kIssued, kCompleted, kFailed, kSkipped };  // skipped: by fault injection
  struct Entry {
    uint64_t id = 0;   // the recorder's own number of the call (1, 2, ...): what finish() names
    uint64_t seq = 0;  // the group call number (Communicator::submit's), 0 for send / recv
    CallSignature signature;
    int peer = -1;  // send / recv
    State state = State::kIssued;
    Clock::time_point start;
    int64_t bytes = 0;
  };

  // Records a call as issued; returns its id. `bytes`: the call's per-rank input bytes (for the trace).
  uint64_t record(uint64_t seq, const CollectiveArgs& args, int64_t bytes = 0);
  // The call `id` finished (no-op once it left the ring); `algorithm`: what ran it (Work::algorithm(), static
  // storage), for the trace.
  void finish(uint64_t id, bool ok, const char* algorithm = "");
  // Fault injection skipped the call `id`: it took its number and did nothing (Note [Fault injection]).
  void mark_skipped(uint64_t id);
  // While tracing (core/trace.h), a finished call is also a span on this communicator's track, from its issue to its
  // completion (Note [The trace recorder]): the group's identity, the same on every member, set once by the funnel.
  bool named() const { return track_ != 0; }
  void set_group(const std::string& uid, std::vector<int> global_ranks, int rank_in_group);
  // The args of a wait on call `id` ({"comm", "seq"}), for the waiting thread's span.
  trace::Deferred wait_args(uint64_t id) const;
  // The last min(n, kCapacity) calls, oldest first.
  std::vector<Entry> recent(size_t n = kCapacity) const;
  // "last calls on this rank: #41 all_reduce(count=4, f32, sum) completed, ..., #42 all_gather(count=8, f32) pending
  // 300.0 s" over the last `n` calls; "no calls recorded on this rank" when there is none.
  std::string describe_recent(size_t n = 8) const;

  // The calls as JSON ({"comm", "ranks", "rank_in_comm", "entries": [...]}) for a dump; "" before set_group.
  std::string dump_json() const;

 private:
  mutable std::mutex mu_;
  std::array<Entry, kCapacity> ring_{};
  uint64_t next_id_ = 1;
  std::atomic<int32_t> track_{0};  // the trace track; 0 until set_group
  // The group's name and its global ranks as JSON ("[0,1,2,3]"), interned (core/trace.h): events keep them past this
  // recorder's life.
  const char* uid_name_ = "";
  const char* ranks_name_ = "[]";
  int rank_in_group_ = 0;
};

// Note [Flight-recorder dumps]
// When a wait on a collective fails or times out (Work::WaitSpan sees the exception leave wait()), the rank writes
// every live communicator's flight recorder to DT_FR_DIR (else DT_TRACE's folder; neither: nothing) as
// fr-rank-NNNNN.json, once per process: the first failure is the cause, later ones its echoes. Every rank that times
// out writes one, so `dttrace fr DIR` can compare the call numbers of the members of each communicator and name the
// rank that is behind, the call it has not reached, one that skipped a call, and mismatched signatures.
void register_flight_recorder(const std::shared_ptr<FlightRecorder>& recorder);
// Writes the dump now (when a folder is configured and none was written yet); returns its path or "". The rank and
// world size are the process's (its default world's). Called when an error quotes a flight recorder
// (describe_recent) and when a wait throws.
std::string dump_flight_recorders(const std::string& reason);

}  // namespace dt
