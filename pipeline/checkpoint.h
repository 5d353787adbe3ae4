// Checkpoints of a pipeline-parallel model under the whole model's names, so that a model saved at pp 2 loads at pp 1,
// 4, or with another split of its blocks into stages (Note [Pipeline checkpoints]).
//
//   nn::ModulePtr mine = pipeline::gpt_rank_module(model, {0, 2}, 4);   // pipeline/gpt_stage.h
//   pipeline::save_checkpoint("ckpt/step-100", *mine, &opt, {{"step", int64_t(100)}}, world);
//   auto r = pipeline::load_checkpoint(dir, *mine, &opt);               // any split saved it
//
// Note [Pipeline checkpoints]
// dt::checkpoint::save wants every rank to pass the same names in the same order; under a pipeline each rank holds
// only its stages' parameters (and their optimizer state). So a save first exchanges every rank's list (names,
// dtypes, shapes, and the scalar metadata, which includes each parameter's optimizer step) over the world, and each
// rank passes the union in one order: its own tensors, and for the others a placeholder of their shape and dtype on a
// mesh of the ranks that hold them (one mesh per group of ranks with the same list, made for the save), of which it
// is not a member, so it writes nothing for them; the writers come from the holders' blocks as always. The merged
// metadata goes into the index. Loading needs no exchange: each rank loads its own names (non-strict), and any of
// them missing from the checkpoint is an error naming it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "nn/checkpoint.h"

namespace dt::pipeline {

// `local` completed with every other rank's names (Note [Pipeline checkpoints]): the same list, in the same order, on
// every rank; placeholders for what this rank does not hold. Collective over `world`.
checkpoint::TensorList complete_tensor_list(const checkpoint::TensorList& local, const CommunicatorPtr& world);

// nn::save_checkpoint for this rank's part of a pipeline-parallel model; collective over `world`.
checkpoint::SaveHandle save_checkpoint_async(const std::string& dir, const nn::Module& mine, nn::Optimizer* optimizer,
                                             const checkpoint::Metadata& metadata, const CommunicatorPtr& world);
// nn::load_checkpoint for this rank's part: every name of `mine` (and its optimizer state) must be in the checkpoint;
// the other ranks' names are expected there and left alone. Not collective.
checkpoint::LoadResult load_checkpoint(const std::string& dir, nn::Module& mine, nn::Optimizer* optimizer);

}  // namespace dt::pipeline
