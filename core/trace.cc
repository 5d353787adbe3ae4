// The span recorder (Note [The trace recorder] in core/trace.h).
#include "core/trace.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/error.h"
#include "core/json_text.h"

namespace dt::trace {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

struct Recorder {
  std::mutex mu;
  bool started = false;
  Options options;
  std::vector<Event> ring;
  size_t head = 0;  // the next slot
  int64_t recorded = 0;
  int64_t offset_ns = 0, uncertainty_ns = -1;  // -1: not estimated (one process, or no alignment ran)
  std::map<int32_t, std::string> track_names;
  int32_t next_thread_track = 1, next_track = 1000;
  bool exit_hook = false;
};

Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: threads may record during static destruction
  return *r;
}

int64_t skew_ns() {
  static const int64_t skew = config::get_int(config::Var::kTraceClockSkewNs);
  return skew;
}

thread_local int32_t t_track = 0;

void escape_into(std::string& out, std::string_view s) { json::escape_into(out, s); }

// Microseconds with nanosecond digits: "12.345" (Chrome trace timestamps are in µs).
void micros_into(std::string& out, int64_t ns) {
  const bool neg = ns < 0;
  const uint64_t a = neg ? uint64_t(-(ns + 1)) + 1 : uint64_t(ns);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", neg ? "-" : "", (unsigned long long)(a / 1000),
                (unsigned long long)(a % 1000));
  out += buf;
}

void write_file_locked(Recorder& r, const std::string& path) {
  const Options& o = r.options;
  std::string out;
  out.reserve(r.ring.size() * 160 + 4096);
  out += "{\"traceEvents\":[\n";
  const std::string pid = std::to_string(o.rank);
  out += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"rank " + pid +
         "\"}},\n";
  out += "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"sort_index\":" + pid +
         "}}";
  for (const auto& [track, name] : r.track_names) {
    out += ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(track) +
           ",\"args\":{\"name\":\"";
    escape_into(out, name);
    out += "\"}}";
  }
  const size_t n = size_t(std::min<int64_t>(r.recorded, int64_t(r.ring.size())));
  const size_t first = r.recorded > int64_t(r.ring.size()) ? r.head : 0;
  for (size_t k = 0; k < n; ++k) {
    const Event& e = r.ring[(first + k) % r.ring.size()];
    out += ",\n{\"ph\":\"X\",\"name\":\"";
    escape_into(out, e.name);
    out += "\",\"cat\":\"";
    out += category_name(e.category);
    out += "\",\"ts\":";
    micros_into(out, e.begin_ns + r.offset_ns);
    out += ",\"dur\":";
    micros_into(out, std::max<int64_t>(0, e.end_ns - e.begin_ns));
    out += ",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.track) + ",\"args\":{";
    if (e.deferred.format != nullptr)
      e.deferred.format(e.deferred.values, out);
    else
      out += e.args;
    out += "}}";
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"dtensor\":{\"version\":1,\"rank\":" + pid +
         ",\"world_size\":" + std::to_string(o.world_size) + ",\"pid\":" + std::to_string(::getpid()) + ",\"host\":\"";
  escape_into(out, host);
  out += "\",\"clock\":{\"offset_ns\":" + std::to_string(r.offset_ns) +
         ",\"uncertainty_ns\":" + std::to_string(r.uncertainty_ns) + ",\"reference_rank\":0}" +
         ",\"events\":" + std::to_string(n) + ",\"dropped\":" + std::to_string(r.recorded - int64_t(n)) +
         ",\"capacity\":" + std::to_string(r.ring.size()) + "}}\n";
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) DT_THROW(SystemError, "trace: cannot write '", tmp, "'");
    f.write(out.data(), std::streamsize(out.size()));
    if (!f) DT_THROW(SystemError, "trace: writing '", tmp, "' failed (disk full?)");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) DT_THROW(SystemError, "trace: cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

void stop_at_exit() {
  try {
    if (started()) stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtensor: %s\n", e.what());
  }
}

}  // namespace

const char* category_name(Category c) {
  switch (c) {
    case Category::kStep:
      return "step";
    case Category::kOp:
      return "op";
    case Category::kCollective:
      return "collective";
    case Category::kWait:
      return "wait";
    case Category::kFsdp:
      return "fsdp";
    case Category::kRedistribute:
      return "redistribute";
    case Category::kCheckpoint:
      return "checkpoint";
    case Category::kOptimizer:
      return "optimizer";
    case Category::kUser:
      return "user";
    case Category::kGpu:
      return "gpu";
  }
  return "user";
}

int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() + skew_ns();
}
int64_t now_ns() { return ns(Clock::now()); }

// ---- args ----

void Args::key(const char* k) {
  if (!body_.empty()) body_ += ',';
  body_ += '"';
  body_ += k;
  body_ += "\":";
}

Args& Args::num(const char* k, int64_t v) {
  key(k);
  char buf[24];
  body_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return *this;
}

Args& Args::real(const char* k, double v) {
  key(k);
  if (!std::isfinite(v)) {
    body_ += "null";
    return *this;
  }
  char buf[32];
  body_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return *this;
}

Args& Args::str(const char* k, std::string_view v) {
  key(k);
  body_ += '"';
  escape_into(body_, v);
  body_ += '"';
  return *this;
}

Args& Args::boolean(const char* k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}

Args& Args::raw(const char* k, std::string_view json) {
  key(k);
  body_ += json;
  return *this;
}

Args& Args::ints(const char* k, const std::vector<int>& v) {
  key(k);
  body_ += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) body_ += ',';
    body_ += std::to_string(v[i]);
  }
  body_ += ']';
  return *this;
}

// ---- tracks, names ----

int32_t thread_track() {
  if (t_track != 0) return t_track;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  t_track = r.next_thread_track++;
  r.track_names.emplace(t_track, "thread " + std::to_string(t_track));
  return t_track;
}

void set_thread_name(const std::string& name) {
  const int32_t track = thread_track();
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.track_names[track] = name;
}

int32_t new_track(const std::string& name) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  const int32_t track = r.next_track++;
  r.track_names[track] = name;
  return track;
}

const char* intern(std::string_view s) {
  static std::mutex mu;
  static auto* names = new std::set<std::string, std::less<>>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = names->find(s);
  if (it == names->end()) it = names->emplace(s).first;
  return it->c_str();
}

// ---- recording ----

namespace {
// The one writer of the ring: the next slot's fields under the lock, then `set_args(slot)` for its args.
template <typename SetArgs>
void push_event(Category category, const char* name, int64_t begin_ns, int64_t end_ns, int32_t track,
                SetArgs&& set_args) {
  if (!enabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.started) return;
  Event& e = r.ring[r.head];
  e.begin_ns = begin_ns;
  e.end_ns = end_ns;
  e.name = name;
  e.category = category;
  e.track = track;
  set_args(e);
  r.head = (r.head + 1) % r.ring.size();
  ++r.recorded;
}
}  // namespace

void record(Category category, const char* name, int64_t begin_ns, int64_t end_ns, int32_t track,
            std::string_view args) {
  push_event(category, name, begin_ns, end_ns, track, [&](Event& e) {
    e.args.assign(args.data(), args.size());  // reuses the slot's buffer once it is large enough
    e.deferred.format = nullptr;
  });
}

void record(Category category, const char* name, int64_t begin_ns, int64_t end_ns, int32_t track,
            const Deferred& args) {
  push_event(category, name, begin_ns, end_ns, track, [&](Event& e) {
    e.args.clear();
    e.deferred = args;
  });
}

void append_dims(std::string& out, const int64_t* dims, size_t n) {
  out += '[';
  char buf[24];
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    out.append(buf, std::to_chars(buf, buf + sizeof buf, dims[i]).ptr);
  }
  out += ']';
}

void append_string(std::string& out, std::string_view s) {
  out += '"';
  escape_into(out, s);
  out += '"';
}

void Span::finish() {
  if (deferred_.format != nullptr)
    record(category_, name_, begin_, now_ns(), thread_track(), deferred_);
  else
    record(category_, name_, begin_, now_ns(), thread_track(), args_);
}

// ---- control ----

void start(const Options& options) {
  DT_CHECK_ARG(!options.dir.empty(), "trace::start: the folder is empty");
  DT_CHECK_ARG(options.rank >= 0 && options.world_size > options.rank, "trace::start: rank ", options.rank,
               " of a world of ", options.world_size);
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  DT_CHECK_ARG(!ec && std::filesystem::is_directory(options.dir), "trace::start: cannot make the folder '", options.dir,
               "'", ec ? ": " + ec.message() : std::string());
  const size_t capacity = options.capacity > 0 ? options.capacity : size_t(config::get_int(config::Var::kTraceEvents));
  (void)skew_ns();  // parsed now: a malformed value fails here, not in the middle of a span
  Recorder& r = recorder();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    DT_CHECK_ARG(!r.started, "trace::start: already recording (to '", r.options.dir, "')");
    r.options = options;
    r.ring.assign(capacity, Event{});
    r.head = 0;
    r.recorded = 0;
    r.offset_ns = 0;
    r.uncertainty_ns = -1;
    r.started = true;
    if (!r.exit_hook) {
      r.exit_hook = true;
      std::atexit(stop_at_exit);
    }
  }
  set_thread_name("main");
  detail::g_on.store(true, std::memory_order_release);
}

std::string stop() {
  drain_gpu_spans(true);  // before the lock: resolved spans are recorded through it
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.started) return "";
  detail::g_on.store(false, std::memory_order_release);
  r.started = false;
  const std::string path = rank_file(r.options.dir, r.options.rank);
  write_file_locked(r, path);
  r.ring.clear();
  r.ring.shrink_to_fit();
  return path;
}

bool started() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.started;
}

void set_clock_offset(int64_t offset_ns, int64_t uncertainty_ns) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.offset_ns = offset_ns;
  r.uncertainty_ns = uncertainty_ns;
}

std::string rank_file(const std::string& dir, int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank-%05d.trace.json", rank);
  return (std::filesystem::path(dir) / name).string();
}

Stats stats() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return {r.recorded, std::max<int64_t>(0, r.recorded - int64_t(r.ring.size())), r.ring.size()};
}

std::vector<Event> snapshot() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<Event> out;
  if (r.ring.empty()) return out;
  const size_t n = size_t(std::min<int64_t>(r.recorded, int64_t(r.ring.size())));
  const size_t first = r.recorded > int64_t(r.ring.size()) ? r.head : 0;
  for (size_t k = 0; k < n; ++k) {
    out.push_back(r.ring[(first + k) % r.ring.size()]);
    Event& e = out.back();
    if (e.deferred.format != nullptr) {
      e.args.clear();
      e.deferred.format(e.deferred.values, e.args);
      e.deferred = Deferred{};
    }
  }
  return out;
}

}  // namespace dt::trace
