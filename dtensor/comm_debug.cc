#include "dtensor/comm_debug.h"

#include <cstdio>

#include "core/error.h"
#include "core/trace.h"

namespace dt {

const char* phase_name(CommDebugMode::Phase phase) {
  switch (phase) {
    case CommDebugMode::Phase::kForward:
      return "forward";
    case CommDebugMode::Phase::kBackward:
      return "backward";
    case CommDebugMode::Phase::kOutside:
      return "outside";
  }
  return "outside";
}

CommDebugMode::CommDebugMode() : thread_(std::this_thread::get_id()) {
  entries_.push_back({Scope{"Global", 0, {}}, 0, 0});
  observer_id_ = add_collective_observer([this](const CollectiveEvent& ev) { observe(ev); });
}

CommDebugMode::~CommDebugMode() { remove_collective_observer(observer_id_); }

CommDebugMode::Entry& CommDebugMode::entry(const std::string& name, int depth) {
  auto it = index_.find(name);
  if (it != index_.end()) return entries_[it->second];
  index_.emplace(name, entries_.size());
  entries_.push_back({Scope{name, depth, {}}, 0, 0});
  return entries_.back();
}

void CommDebugMode::declare(const std::string& name, int depth) {
  DT_CHECK_ARG(name != "Global", "CommDebugMode: 'Global' is the outermost scope's name");
  std::lock_guard<std::mutex> lock(mu_);
  entry(name, depth);
}

void CommDebugMode::enter(const std::string& name, Phase phase) {
  DT_CHECK_ARG(phase != Phase::kOutside, "CommDebugMode::enter: a scope is forward or backward");
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entry(name, 1);
  ++(phase == Phase::kBackward ? e.active_backward : e.active_forward);
}

void CommDebugMode::exit(const std::string& name, Phase phase) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(name);
  DT_CHECK_ARG(it != index_.end(), "CommDebugMode::exit: scope '", name, "' was never entered");
  int& active = phase == Phase::kBackward ? entries_[it->second].active_backward : entries_[it->second].active_forward;
  DT_CHECK_ARG(active > 0, "CommDebugMode::exit: scope '", name, "' is not active in ", phase_name(phase));
  --active;
}

void CommDebugMode::observe(const CollectiveEvent& ev) {
  if (std::this_thread::get_id() != thread_) return;
  const CollectiveArgs& a = *ev.args;
  const std::string kind = collective_kind_name(a.kind);
  const int64_t bytes = a.input_bytes(ev.comm->size());
  std::lock_guard<std::mutex> lock(mu_);
  bool backward = false, any = false;
  for (size_t i = 1; i < entries_.size(); ++i) {
    backward = backward || entries_[i].active_backward > 0;
    any = any || entries_[i].active_backward > 0 || entries_[i].active_forward > 0;
  }
  const Phase phase = !any ? Phase::kOutside : backward ? Phase::kBackward : Phase::kForward;
  auto add = [&](Entry& e) {
    Count& c = e.scope.by_phase[phase][kind];
    ++c.calls;
    c.bytes += bytes;
  };
  add(entries_[0]);
  for (size_t i = 1; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (phase == Phase::kBackward ? e.active_backward > 0 : e.active_forward > 0) add(e);
  }
}

std::vector<CommDebugMode::Scope> CommDebugMode::scopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Scope> out;
  for (const Entry& e : entries_) out.push_back(e.scope);
  return out;
}

CommDebugMode::Count CommDebugMode::global(CollectiveKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  Count sum;
  for (const auto& [phase, counts] : entries_[0].scope.by_phase)
    if (auto it = counts.find(collective_kind_name(kind)); it != counts.end()) {
      sum.calls += it->second.calls;
      sum.bytes += it->second.bytes;
    }
  return sum;
}

int64_t CommDebugMode::count(CollectiveKind kind) const { return global(kind).calls; }
int64_t CommDebugMode::bytes(CollectiveKind kind) const { return global(kind).bytes; }

int64_t CommDebugMode::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [phase, counts] : entries_[0].scope.by_phase)
    for (const auto& [kind, c] : counts) n += c.calls;
  return n;
}

namespace {
std::string size_text(int64_t bytes) {
  char buf[32];
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%lld B", (long long)bytes);
  else if (bytes < (int64_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(bytes) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}
}  // namespace

std::string CommDebugMode::to_text() const {
  const std::vector<Scope> all = scopes();
  std::string out;
  if (all[0].by_phase.empty()) return "no collectives\n";
  for (const Scope& s : all) {
    const std::string pad(size_t(2 * s.depth), ' ');
    out += pad + s.name + "\n";
    for (const auto& [phase, counts] : s.by_phase) {
      out += pad + "  " + phase_name(phase) + "\n";
      for (const auto& [kind, c] : counts)
        out += pad + "    " + kind + ": " + std::to_string(c.calls) + " (" + size_text(c.bytes) + ")\n";
    }
  }
  return out;
}

std::string CommDebugMode::to_json() const {
  const std::vector<Scope> all = scopes();
  std::string out = "{\"scopes\":[";
  for (size_t i = 0; i < all.size(); ++i) {
    const Scope& s = all[i];
    out += (i ? ",\n" : "\n") + std::string("{") + trace::Args().str("name", s.name).num("depth", s.depth).take();
    for (const auto& [phase, counts] : s.by_phase) {
      out += ",\"" + std::string(phase_name(phase)) + "\":{";
      bool first = true;
      for (const auto& [kind, c] : counts) {
        out += (first ? "\"" : ",\"") + kind + "\":{" +
               trace::Args().num("calls", c.calls).num("bytes", c.bytes).take() + "}";
        first = false;
      }
      out += "}";
    }
    out += "}";
  }
  return out + "]}\n";
}

void CommDebugMode::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Entry& e : entries_) e.scope.by_phase.clear();
}

}  // namespace dt
