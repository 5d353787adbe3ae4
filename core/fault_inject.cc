#include "core/fault_inject.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "core/logging.h"

namespace dt::fault {
namespace {

struct Spec {
  int64_t rank = -1;
  std::string point;
  int64_t n = 0;
  Action action = Action::kNone;
  std::atomic<int64_t> passes{0};
};

Action parse_action(const std::string& word, const std::string& spec) {
  if (word == "kill") return Action::kKill;
  if (word == "term") return Action::kTerm;
  if (word == "exit") return Action::kExit;
  if (word == "abort") return Action::kAbort;
  if (word == "stop") return Action::kStop;
  if (word == "skip") return Action::kSkip;
  DT_THROW(InvalidArgument, config::info(config::Var::kFaultInject).name, "='", spec, "': unknown action '", word,
           "' (expected kill, term, exit, abort, stop or skip)");
}

int64_t parse_count(const std::string& word, const std::string& what, const std::string& spec) {
  char* end = nullptr;
  const long long v = std::strtoll(word.c_str(), &end, 10);
  DT_CHECK_ARG(!word.empty() && end && *end == 0 && v >= 0, config::info(config::Var::kFaultInject).name, "='", spec,
               "': ", what, " must be a non-negative integer, got '", word, "'");
  return v;
}

// The spec of this process, or null when none applies to it (parsed once).
Spec* parse() {
  if (!config::is_set(config::Var::kFaultInject)) return nullptr;
  const std::string spec = config::get_string(config::Var::kFaultInject);
  std::string parts[4];
  size_t start = 0, i = 0;
  for (; i < 4; ++i) {
    const size_t colon = spec.find(':', start);
    parts[i] = spec.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  DT_CHECK_ARG(i == 3, config::info(config::Var::kFaultInject).name, "='", spec,
               "': expected RANK:POINT:N:ACTION, e.g. 2:all_gather:40:kill");
  auto* s = new Spec;  // lives as long as the process (points may be passed during static destruction)
  s->rank = parse_count(parts[0], "RANK", spec);
  s->point = parts[1];
  s->n = parse_count(parts[2], "N", spec);
  s->action = parse_action(parts[3], spec);
  const int64_t me = config::is_set(config::Var::kRank) ? config::get_int(config::Var::kRank) : 0;
  // The first generation only: an elastic job's restart does not fail again at the same point.
  const int64_t generation =
      config::is_set(config::Var::kRestartCount) ? config::get_int(config::Var::kRestartCount) : 0;
  if (s->rank != me || generation > 0) {
    delete s;
    return nullptr;
  }
  return s;
}

}  // namespace

Action at(std::string_view point) {
  static Spec* const spec = parse();
  if (spec == nullptr || point != spec->point) return Action::kNone;
  if (spec->passes.fetch_add(1) + 1 != spec->n) return Action::kNone;
  DT_LOG_WARN("fault injection (", config::info(config::Var::kFaultInject).name, "): ", spec->point, " pass ", spec->n,
              " on rank ", spec->rank);
  return spec->action;
}

void perform(Action a) {
  switch (a) {
    case Action::kNone:
    case Action::kSkip:
      return;
    case Action::kKill:
      ::raise(SIGKILL);
      return;
    case Action::kTerm:
      ::raise(SIGTERM);  // returns only where the program handles SIGTERM: then it is the program's to act on
      return;
    case Action::kExit:
      std::exit(3);
    case Action::kAbort:
      std::abort();
    case Action::kStop:
      ::raise(SIGSTOP);
      return;
  }
}

}  // namespace dt::fault
