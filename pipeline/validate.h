// Checks a schedule before anything runs: every action well-formed and on its stage's rank, every transfer
// matched, every microbatch's forward and backward present once and in an order that can run, no cycle of waits,
// the stated memory bound kept, and FSDP's lifecycle followed.
//
//   const ValidationReport report = validate(schedule);  // InvalidArgument otherwise, naming the rank, the action's
//                                                        // index in the rank's list and the action
//
// Note [Pipeline schedule semantics]
// Each rank runs its list in order, one action at a time; only a RECV ever waits. What each action needs:
// - {s}SEND_F{mb} runs on stage s's rank and posts stage s's output to stage s + 1's rank; {s}SEND_B{mb} posts
//   stage s's input gradient to stage s - 1's rank. A SEND never blocks: the message is buffered until received.
// - {s}RECV_F{mb} runs on stage s's rank and waits for {s-1}SEND_F{mb}; {s}RECV_B{mb} waits for {s+1}SEND_B{mb}.
//   Messages match by identity (kind, stage, microbatch), like tagged messages, whatever the order of posting.
// - Transfers exist only between stages on different ranks: stages on one rank pass tensors locally.
// - {s}F{mb} needs its input: s is the first stage, or {s-1}F{mb} ran before it (stage s - 1 on the same rank), or
//   {s}RECV_F{mb} did. {s}SEND_F{mb} needs {s}F{mb} before it.
// - {s}B{mb} and {s}I{mb} need {s}F{mb} and the output gradient: s is the last stage, or {s+1}B{mb} or {s+1}I{mb}
//   ran before (same rank), or {s}RECV_B{mb} did. {s}SEND_B{mb} needs {s}B{mb} or {s}I{mb} before it. {s}W{mb} needs
//   {s}I{mb} before it.
// - Every (stage, microbatch) has exactly one F and either one B or one I and one W. Every action runs on the rank
//   of its stage and appears once (UNSHARD and RESHARD may repeat); every SEND has its RECV and every RECV its SEND.
// - Activations in flight on a rank: the (stage, microbatch) pairs whose F ran and whose B or I has not. Never more
//   than memory_bound[rank]. A deferred W holds less (what the weight gradient needs); the report counts those
//   apart and the bound does not.
// - FSDP: a schedule with any UNSHARD, RESHARD or REDUCE_GRAD follows FSDP's lifecycle on every stage. A stage
//   starts sharded; UNSHARD needs it sharded and RESHARD unsharded; every compute on it runs unsharded; it has
//   exactly one REDUCE_GRAD, after all its B and W.
// Since sends never block and a receive waits for one named message, what each rank gets to does not depend on
// timing (a Kahn network): running every rank until it waits, round after round, reaches the state any execution
// reaches. The validator does exactly that; if ranks are left waiting, that is a deadlock and it names each
// waiting rank's action and the cycle of waits (there always is one: every waiting rank waits for a rank that is
// itself stopped before the awaited SEND). A schedule it accepts runs to the end under any timing, given buffers
// for the messages posted and not yet received.
#pragma once

#include <vector>

#include "pipeline/schedule.h"

namespace dt::pipeline {

struct ValidationReport {
  std::vector<int> peak_activations = {};       // per rank (<= memory_bound)
  std::vector<int> peak_deferred_weights = {};  // per rank: the most microbatches whose I ran and W has not
  int num_transfers = 0;                        // SEND/RECV pairs
  bool fsdp = false;                            // whether the schedule has FSDP actions
};

ValidationReport validate(const Schedule& schedule);

}  // namespace dt::pipeline
