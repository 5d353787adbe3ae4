// Who writes what, and where, in a save (Note [Checkpoint layout]): pure functions of the tensors' layouts that
// every rank computes alike, so that no rank needs another's plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/checkpoint/box.h"
#include "dtensor/checkpoint/index.h"
#include "dtensor/checkpoint/safetensors.h"
#include "placement/sharding_spec.h"

namespace dt::checkpoint {

struct SavedTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  ShardingSpec spec;  // without Partial (reduced before the save); for the index, to be read by people
};

struct PlannedBlock {
  Box box;
  int64_t writer = 0;  // global rank
};

// The distinct non-empty blocks of every tensor, each with the replica that writes it: tensors in order, each block to
// the replica with the fewest bytes so far, ties to the lowest rank. boxes[r][i] is rank r's block of tensor i (every
// rank's, gathered: ranks that hold the same box are replicas, whatever meshes they are on, e.g. the tp sub-meshes
// of different dp groups).
std::vector<std::vector<PlannedBlock>> plan_writers(const std::vector<SavedTensor>& tensors,
                                                    const std::vector<std::vector<Box>>& boxes);

struct RankFile {
  std::string name;    // "<save id>-r<rank>.safetensors"
  std::string header;  // the safetensors header bytes (length field included)
  uint64_t bytes = 0;  // the whole file
  struct Entry {
    size_t tensor = 0;  // index into the tensors
    Box box;
    uint64_t begin = 0;  // file offset
    uint64_t bytes = 0;
  };
  std::vector<Entry> entries;
};

// Rank `rank`'s file: its blocks in tensor order, back to back after the header.
RankFile rank_file(const std::string& save_id, int64_t rank, const std::vector<SavedTensor>& tensors,
                   const std::vector<std::vector<PlannedBlock>>& plan);
std::string rank_file_name(const std::string& save_id, int64_t rank);
std::string rank_meta_name(const std::string& save_id, int64_t rank);   // its checksums, written after its file
std::string rank_error_name(const std::string& save_id, int64_t rank);  // written instead when its part failed
// Whether a file name in a checkpoint folder is one of this format's (rank files, their metadata, temporaries).
bool is_checkpoint_file(const std::string& name);

}  // namespace dt::checkpoint
