// One step of a pipeline schedule on one rank: a compute (forward, backward, or the backward split into input and
// weight gradients), a point-to-point transfer, or an FSDP lifecycle call. Actions read and print as PyTorch's
// torch.distributed.pipelining action strings:
//
//   {stage}F{mb}  {stage}B{mb}  {stage}I{mb}  {stage}W{mb}                       compute
//   {stage}SEND_F{mb}  {stage}RECV_F{mb}  {stage}SEND_B{mb}  {stage}RECV_B{mb}   transfers
//   {stage}UNSHARD  {stage}RESHARD  {stage}REDUCE_GRAD                           FSDP (no microbatch)
//
// What each one needs and does is Note [Pipeline schedule semantics] in pipeline/validate.h.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace dt::pipeline {

enum class ActionKind {
  kForward,         // F
  kBackward,        // B: input and weight gradients together
  kBackwardInput,   // I: the input gradient (on the critical path)
  kBackwardWeight,  // W: the weight gradient (may be deferred)
  kSendF,           // SEND_F: stage s's output to stage s + 1's rank
  kRecvF,           // RECV_F: stage s's input from stage s - 1's rank
  kSendB,           // SEND_B: stage s's input gradient to stage s - 1's rank
  kRecvB,           // RECV_B: stage s's output gradient from stage s + 1's rank
  kUnshard,         // UNSHARD: gather the stage's parameters
  kReshard,         // RESHARD: free the gathered parameters
  kReduceGrad,      // REDUCE_GRAD: reduce-scatter the stage's gradients
};

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;
  int microbatch = -1;  // -1 for kUnshard, kReshard and kReduceGrad
  friend bool operator==(const Action&, const Action&) = default;
};

const char* kind_name(ActionKind kind);  // "F", "SEND_F", "UNSHARD", ...
bool is_compute(ActionKind kind);        // F, B, I, W
bool is_send(ActionKind kind);
bool is_recv(ActionKind kind);
bool is_fsdp(ActionKind kind);  // UNSHARD, RESHARD, REDUCE_GRAD: the ones without a microbatch

// The transfer at the other end: {s}SEND_F{mb} <-> {s+1}RECV_F{mb}, {s}SEND_B{mb} <-> {s-1}RECV_B{mb}.
Action peer_transfer(const Action& transfer);

std::string to_string(const Action& action);
std::ostream& operator<<(std::ostream& os, const Action& action);
// The inverse of to_string; InvalidArgument naming the token when it is not one.
Action parse_action(std::string_view token);

}  // namespace dt::pipeline
