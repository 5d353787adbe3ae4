// The built-in schedules. Each writes the compute order of every rank, states its memory bound per rank (the most
// activations in flight: Note [Pipeline schedule semantics] in pipeline/validate.h), and lowers it with
// add_send_recv (and add_fsdp_actions when asked; pipeline/lower.h). p ranks, m >= 1 microbatches; one stage per
// rank, stage r on rank r, except for the interleaved schedule. Rank r's bound:
//
// - gpipe: all forwards, then all backwards (GPipe). Bound m.
// - 1f1b: p - 1 - r warmup forwards on rank r, then one forward one backward, then the remaining backwards
//   (PipeDream-flush, Megatron's default). Bound min(p - r, m).
// - interleaved: v stages per rank, stage s on rank s % p (Megatron's interleaved 1F1B, looped placement), the
//   microbatches in groups of g (Note [Interleaved microbatch groups]). Bound min(2 (p - 1 - r) + (v - 1) g + 1, v m).
// - zb-h1: 1F1B with the backward split into I (the input gradient, on the critical path) and W (the weight
//   gradient), rank r holding back its first r W's to fill the drain (ZB-H1 of "Zero Bubble Pipeline Parallelism",
//   Qi et al. 2023, in PyTorch's order). Bound min(p - r, m), as 1F1B.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace dt::pipeline {

struct BuildOptions {
  bool fsdp = false;  // add {s}UNSHARD, {s}REDUCE_GRAD and {s}RESHARD (add_fsdp_actions)
};

Schedule gpipe(int num_ranks, int num_microbatches, const BuildOptions& options = {});
Schedule one_f_one_b(int num_ranks, int num_microbatches, const BuildOptions& options = {});
Schedule interleaved_one_f_one_b(int num_ranks, int num_microbatches, int stages_per_rank,
                                 const BuildOptions& options = {});
Schedule zero_bubble_h1(int num_ranks, int num_microbatches, const BuildOptions& options = {});

// The names by_name accepts: "gpipe", "1f1b", "interleaved", "zb-h1".
const std::vector<std::string>& schedule_names();
// The schedule of that name (InvalidArgument listing schedule_names() for another). stages_per_rank is the
// interleaved schedule's v; the others have one stage per rank and refuse another value.
Schedule by_name(const std::string& name, int num_ranks, int num_microbatches, int stages_per_rank = 1,
                 const BuildOptions& options = {});

}  // namespace dt::pipeline
