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
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/call_signature.h"

namespace dt {

class FlightRecorder {
 public:
  static constexpr size_t kCapacity = 64;
  using Clock = std::chrono::steady_clock;
  enum class State : uint8_t { kIssued, kCompleted, kFailed };
  struct Entry {
    uint64_t id = 0;   // the recorder's own number of the call (1, 2, ...): what finish() names
    uint64_t seq = 0;  // the group call number (Communicator::submit's), 0 for send / recv
    CallSignature signature;
    int peer = -1;  // send / recv
    State state = State::kIssued;
    Clock::time_point start;
  };

  // Records a call as issued; returns its id.
  uint64_t record(uint64_t seq, const CollectiveArgs& args);
  // The call `id` finished (no-op once it left the ring).
  void finish(uint64_t id, bool ok);
  // The last min(n, kCapacity) calls, oldest first.
  std::vector<Entry> recent(size_t n = kCapacity) const;
  // "last calls on this rank: #41 all_reduce(count=4, f32, sum) completed, ..., #42 all_gather(count=8, f32) pending
  // 300.0 s" over the last `n` calls; "no calls recorded on this rank" when there is none.
  std::string describe_recent(size_t n = 8) const;

 private:
  mutable std::mutex mu_;
  std::array<Entry, kCapacity> ring_{};
  uint64_t next_id_ = 1;
};

}  // namespace dt
