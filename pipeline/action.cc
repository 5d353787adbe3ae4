// Pipeline actions and their text form (pipeline/action.h).
#include "pipeline/action.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "core/error.h"

namespace dt::pipeline {
namespace {

constexpr std::array<ActionKind, 11> kAllKinds = {
    ActionKind::kForward, ActionKind::kBackward, ActionKind::kBackwardInput, ActionKind::kBackwardWeight,
    ActionKind::kSendF,   ActionKind::kRecvF,    ActionKind::kSendB,         ActionKind::kRecvB,
    ActionKind::kUnshard, ActionKind::kReshard,  ActionKind::kReduceGrad,
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A run of decimal digits as a non-negative int; -1 when it does not fit.
int parse_count(std::string_view digits) {
  int value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  return ec == std::errc() && end == digits.data() + digits.size() ? value : -1;
}

}  // namespace

const char* kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendF:
      return "SEND_F";
    case ActionKind::kRecvF:
      return "RECV_F";
    case ActionKind::kSendB:
      return "SEND_B";
    case ActionKind::kRecvB:
      return "RECV_B";
    case ActionKind::kUnshard:
      return "UNSHARD";
    case ActionKind::kReshard:
      return "RESHARD";
    case ActionKind::kReduceGrad:
      return "REDUCE_GRAD";
  }
  return "?";
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput ||
         kind == ActionKind::kBackwardWeight;
}
bool is_send(ActionKind kind) { return kind == ActionKind::kSendF || kind == ActionKind::kSendB; }
bool is_recv(ActionKind kind) { return kind == ActionKind::kRecvF || kind == ActionKind::kRecvB; }
bool is_fsdp(ActionKind kind) {
  return kind == ActionKind::kUnshard || kind == ActionKind::kReshard || kind == ActionKind::kReduceGrad;
}

Action peer_transfer(const Action& a) {
  switch (a.kind) {
    case ActionKind::kSendF:
      return {ActionKind::kRecvF, a.stage + 1, a.microbatch};
    case ActionKind::kRecvF:
      return {ActionKind::kSendF, a.stage - 1, a.microbatch};
    case ActionKind::kSendB:
      return {ActionKind::kRecvB, a.stage - 1, a.microbatch};
    case ActionKind::kRecvB:
      return {ActionKind::kSendB, a.stage + 1, a.microbatch};
    default:
      break;
  }
  DT_THROW(InternalError, "peer_transfer of ", to_string(a), ", which is no transfer");
}

std::string to_string(const Action& a) {
  std::string s = std::to_string(a.stage) + kind_name(a.kind);
  if (!is_fsdp(a.kind)) s += std::to_string(a.microbatch);
  return s;
}

std::ostream& operator<<(std::ostream& os, const Action& a) { return os << to_string(a); }

Action parse_action(std::string_view token) {
  size_t i = 0;
  while (i < token.size() && is_digit(token[i])) ++i;
  size_t j = i;
  while (j < token.size() && !is_digit(token[j])) ++j;
  const std::string_view stage = token.substr(0, i), kind = token.substr(i, j - i), mb = token.substr(j);
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(str_cat("bad pipeline action '", token, "': ", why,
                                   " (expected {stage}{KIND}{microbatch}, e.g. 0F3, 1SEND_B0, or {stage}UNSHARD)"));
  };
  if (stage.empty()) throw bad("no stage number in front");
  Action a{.kind = ActionKind::kForward, .stage = parse_count(stage), .microbatch = -1};
  if (a.stage < 0) throw bad("stage out of range");
  bool known = false;
  for (ActionKind k : kAllKinds) {
    if (kind != kind_name(k)) continue;
    a.kind = k;
    known = true;
  }
  if (!known) {
    std::string kinds;
    for (ActionKind k : kAllKinds) kinds += str_cat(kinds.empty() ? "" : ", ", kind_name(k));
    throw bad(str_cat("unknown kind '", kind, "' (one of ", kinds, ")"));
  }
  if (is_fsdp(a.kind)) {
    if (!mb.empty()) throw bad(str_cat(kind, " takes no microbatch"));
    return a;
  }
  if (mb.empty()) throw bad(str_cat(kind, " needs a microbatch number after it"));
  if (!std::all_of(mb.begin(), mb.end(), is_digit)) throw bad("trailing characters after the microbatch");
  a.microbatch = parse_count(mb);
  if (a.microbatch < 0) throw bad("microbatch out of range");
  return a;
}

}  // namespace dt::pipeline
