#include "collectives/flight_recorder.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

namespace dt {

uint64_t FlightRecorder::record(uint64_t seq, const CollectiveArgs& args) {
  const CallSignature sig = CallSignature::of(args);
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  Entry& e = ring_[id % kCapacity];
  e.id = id;
  e.seq = seq;
  e.signature = sig;
  e.peer = args.peer;
  e.state = State::kIssued;
  e.start = now;
  return id;
}

void FlightRecorder::finish(uint64_t id, bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = ring_[id % kCapacity];
  if (e.id == id) e.state = ok ? State::kCompleted : State::kFailed;
}

std::vector<FlightRecorder::Entry> FlightRecorder::recent(size_t n) const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t count = std::min<uint64_t>({n, kCapacity, next_id_ - 1});
  std::vector<Entry> out;
  out.reserve(size_t(count));
  for (uint64_t id = next_id_ - count; id < next_id_; ++id) out.push_back(ring_[id % kCapacity]);
  return out;
}

std::string FlightRecorder::describe_recent(size_t n) const {
  const std::vector<Entry> entries = recent(n);
  if (entries.empty()) return "no calls recorded on this rank";
  const auto now = Clock::now();
  std::ostringstream os;
  os << "last calls on this rank:";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    os << (i ? ", " : " ");
    const bool p2p = e.signature.kind == CollectiveKind::kSend || e.signature.kind == CollectiveKind::kRecv;
    if (p2p) {
      os << collective_kind_name(e.signature.kind) << "(count=" << e.signature.count << ", "
         << dtype_name(e.signature.dtype) << ", peer=" << e.peer << ")";
    } else {
      os << "#" << e.seq << " " << e.signature.describe();
    }
    switch (e.state) {
      case State::kCompleted:
        os << " completed";
        break;
      case State::kFailed:
        os << " failed";
        break;
      case State::kIssued:
        os << " pending " << std::fixed << std::setprecision(1) << std::chrono::duration<double>(now - e.start).count()
           << " s" << std::defaultfloat;
        break;
    }
  }
  return os.str();
}

}  // namespace dt
