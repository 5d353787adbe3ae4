// Fault injection for reliability tests (DT_FAULT_INJECT): a process fails on purpose at a named point.
//
// Note [Fault injection]
// DT_FAULT_INJECT=RANK:POINT:N:ACTION makes the process of rank RANK (DT_RANK; 0 when unset) perform ACTION the Nth
// time (1-based) it passes POINT. Points: a collective's kind name (all_gather, reduce_scatter, all_reduce, ...: the
// call is already issued, so the peers are inside it), `compute` (an op's local kernel is about to run) and
// `checkpoint_save` (this rank's file is half written). Actions: kill (SIGKILL), term (SIGTERM), exit (exit(3) with
// the static destructors), abort, stop (SIGSTOP: a hung rank) and skip (collectives only: the call takes its
// sequence number and does nothing, as a lost call would, so the peers wait for this rank at that number). Only the
// first generation of an elastic job (DT_RESTART_COUNT 0 or unset) fails: its restart runs clean. The fault
// matrix (tests/reliability/fault_matrix.py) drives training through every point and action. Unset, a point costs
// one load of a flag.
#pragma once

#include <string_view>

namespace dt::fault {

enum class Action { kNone, kKill, kTerm, kExit, kAbort, kStop, kSkip };

// Counts one pass of this process through `point`; returns the action due now (kNone almost always). The caller
// performs it with perform() where it wants the fault to happen (after issuing a collective, for instance).
Action at(std::string_view point);

// Performs `a`: the signals and exits do not return; stop returns once the process is continued (SIGCONT); kNone
// and kSkip return at once (skipping is the caller's part).
void perform(Action a);

// at() then perform() for points that cannot skip.
inline void point(std::string_view name) {
  if (Action a = at(name); a != Action::kNone) perform(a);
}

}  // namespace dt::fault
