// Lowering passes: from per-rank compute orders to a schedule that runs (PyTorch's _add_send_recv and
// _add_unshard_reshard). The generators of pipeline/schedule_builders.h write compute actions only and call these;
// a hand-written compute-only table can go through them too.
#pragma once

#include "pipeline/schedule.h"

namespace dt::pipeline {

// Adds the transfers to a schedule of compute actions (InvalidArgument if it has transfers or FSDP actions
// already): after a compute whose output goes to a stage on another rank, its SEND (SEND_F after F, SEND_B after B
// or I); right before a compute that needs an input from another rank, its RECV. Stages on the same rank pass
// tensors locally, with no transfer. Sends never block (Note [Pipeline schedule semantics]), so a compute order
// that no cycle of dependencies blocks stays deadlock-free.
void add_send_recv(Schedule& schedule);

// Adds FSDP's lifecycle per stage: {s}UNSHARD right before the stage's first compute on its rank (before the RECV
// of that compute's input, if it has one: the gather overlaps the wait), and {s}REDUCE_GRAD then {s}RESHARD right
// after its last B or W (after the SEND_B that follows it, if any: the rank before need not wait for the
// reduction). InvalidArgument if it has FSDP actions already.
void add_fsdp_actions(Schedule& schedule);

}  // namespace dt::pipeline
