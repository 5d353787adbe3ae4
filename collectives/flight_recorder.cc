#include "collectives/flight_recorder.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "core/config.h"
#include "core/logging.h"
#include "core/trace.h"

namespace dt {

uint64_t FlightRecorder::record(uint64_t seq, const CollectiveArgs& args, int64_t bytes) {
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
  e.bytes = bytes;
  return id;
}

void FlightRecorder::finish(uint64_t id, bool ok, const char* algorithm) {
  Entry copy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = ring_[id % kCapacity];
    if (e.id != id) return;
    if (e.state != State::kSkipped) e.state = ok ? State::kCompleted : State::kFailed;
    if (!trace::enabled() || track_.load() == 0) return;
    copy = e;
  }
  // The call's span on this communicator's track (Note [The trace recorder]): the recorder's own start, not a second
  // timer. Its args are formatted when the file is written.
  const CallSignature& s = copy.signature;
  trace::Deferred d;
  d.format = [](const int64_t* v, std::string& out) {
    CallSignature sig;
    sig.kind = CollectiveKind(v[7]);
    sig.count = v[8];
    sig.dtype = DType(v[9]);
    sig.op = ReduceOp(v[10]);
    sig.root = int(v[11]);
    sig.split = (v[12] & 1) != 0;
    sig.views = (v[12] & 2) != 0;
    sig.segments = (v[12] & 4) != 0;
    out += "\"comm\":";
    trace::append_string(out, trace::Deferred::name_at(v, 0));
    out += "," + trace::Args().num("seq", v[1]).num("bytes", v[2]).take() +
           ",\"ranks\":" + trace::Deferred::name_at(v, 3) + "," +
           trace::Args().num("rank_in_comm", v[4]).num("peer", v[5]).boolean("ok", v[6] != 0).take() +
           ",\"signature\":";
    trace::append_string(out, sig.describe());
    out += ",\"algorithm\":";
    trace::append_string(out, trace::Deferred::name_at(v, 13));
  };
  d.push_name(uid_name_);
  d.push(int64_t(copy.seq));
  d.push(copy.bytes);
  d.push_name(ranks_name_);
  d.push(rank_in_group_);
  d.push(copy.peer);
  d.push(ok ? 1 : 0);
  d.push(int64_t(s.kind));
  d.push(s.count);
  d.push(int64_t(s.dtype));
  d.push(int64_t(s.op));
  d.push(s.root);
  d.push((s.split ? 1 : 0) | (s.views ? 2 : 0) | (s.segments ? 4 : 0));
  d.push_name(algorithm != nullptr ? algorithm : "");  // Work::algorithm(): static storage
  trace::record(trace::Category::kCollective, collective_kind_name(s.kind), trace::ns(copy.start), trace::now_ns(),
                track_.load(), d);
}

void FlightRecorder::mark_skipped(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = ring_[id % kCapacity];
  if (e.id == id) e.state = State::kSkipped;
}

namespace {
const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::kIssued:
      return "issued";
    case FlightRecorder::State::kCompleted:
      return "completed";
    case FlightRecorder::State::kFailed:
      return "failed";
    case FlightRecorder::State::kSkipped:
      return "skipped";
  }
  return "issued";
}

std::mutex g_registry_mu;
std::vector<std::weak_ptr<FlightRecorder>>& registry() {
  static auto* r = new std::vector<std::weak_ptr<FlightRecorder>>;
  return *r;
}
bool g_dumped = false;
}  // namespace

std::string FlightRecorder::dump_json() const {
  const std::vector<Entry> entries = recent();
  std::lock_guard<std::mutex> lock(mu_);
  if (track_.load() == 0) return "";
  const auto now = Clock::now();
  std::string out =
      "{" + trace::Args().str("comm", uid_name_).raw("ranks", ranks_name_).num("rank_in_comm", rank_in_group_).take() +
      ",\"entries\":[";
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    out += (i ? ",\n  {" : "\n  {") +
           trace::Args()
               .num("id", int64_t(e.id))
               .num("seq", int64_t(e.seq))
               .str("kind", collective_kind_name(e.signature.kind))
               .str("signature", e.signature.describe())
               .str("state", state_name(e.state))
               .real("age_s", std::chrono::duration<double>(now - e.start).count())
               .num("peer", e.peer)
               .num("bytes", e.bytes)
               .take() +
           "}";
  }
  return out + "]}";
}

void register_flight_recorder(const std::shared_ptr<FlightRecorder>& recorder) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto& r = registry();
  std::erase_if(r, [](const auto& w) { return w.expired(); });
  r.push_back(recorder);
}

std::string dump_flight_recorders(const std::string& reason) {
  std::string dir = config::get_string(config::Var::kFrDir);
  if (dir.empty()) dir = config::get_string(config::Var::kTrace);
  if (dir.empty()) return "";
  const CommunicatorPtr world = default_world_or_null();
  const int rank = std::max(current_rank(), 0), world_size = world ? world->size() : 1;
  std::vector<std::shared_ptr<FlightRecorder>> live;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    if (g_dumped) return "";
    g_dumped = true;
    for (const auto& w : registry())
      if (auto p = w.lock()) live.push_back(std::move(p));
  }
  std::string out = "{" + trace::Args().num("rank", rank).num("world_size", world_size).str("reason", reason).take() +
                    ",\"communicators\":[";
  bool first = true;
  for (const auto& p : live) {
    const std::string c = p->dump_json();
    if (c.empty()) continue;
    out += (first ? "\n" : ",\n") + c;
    first = false;
  }
  out += "]}\n";
  char name[40];
  std::snprintf(name, sizeof name, "fr-rank-%05d.json", rank);
  const std::string path = (std::filesystem::path(dir) / name).string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream f(path + ".tmp", std::ios::trunc);
  f << out;
  f.close();
  std::filesystem::rename(path + ".tmp", path, ec);
  if (!f || ec) {
    DT_LOG_WARN("could not write the flight recorder to '", path, "'");
    return "";
  }
  DT_LOG_WARN("wrote this rank's flight recorder to ", path, " (dttrace fr ", dir, ")");
  return path;
}

void FlightRecorder::set_group(const std::string& uid, std::vector<int> global_ranks, int rank_in_group) {
  std::lock_guard<std::mutex> lock(mu_);
  if (track_.load() != 0) return;
  std::string ranks = "[";
  for (size_t i = 0; i < global_ranks.size(); ++i) ranks += (i ? "," : "") + std::to_string(global_ranks[i]);
  rank_in_group_ = rank_in_group;
  uid_name_ = trace::intern(uid);
  ranks_name_ = trace::intern(ranks + "]");
  track_.store(trace::new_track("comm " + uid));
}

trace::Deferred FlightRecorder::wait_args(uint64_t id) const {
  trace::Deferred d;
  d.format = [](const int64_t* v, std::string& out) {
    out += "\"comm\":";
    trace::append_string(out, trace::Deferred::name_at(v, 0));
    out += trace::Args().num("seq", v[1]).take().insert(0, ",");
  };
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = ring_[id % kCapacity];
  d.push_name(uid_name_);
  d.push(e.id == id ? int64_t(e.seq) : -1);
  return d;
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
  // An error is quoting this record: the moment to leave every communicator's record for `dttrace fr`.
  try {
    dump_flight_recorders("an error quoted this rank's flight recorder");
  } catch (...) {  // the error being built is what the caller must see
  }
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
      case State::kSkipped:
        os << " skipped (fault injection)";
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
