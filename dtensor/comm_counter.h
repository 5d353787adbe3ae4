// CommCounter: counts the collectives issued within its scope (like PyTorch's CommDebugMode): how many of each
// kind ran, on which mesh dim, with how many bytes. Tests use it to prove that no unneeded communication happens.
//
//   dt::CommCounter counter(mesh);
//   auto y = x.redistribute({dt::Replicate(), dt::Shard(1)});
//   counter.count(dt::CollectiveKind::kAllGather, /*mesh_dim=*/1)   // 1
//
// Only calls made by the thread that created the counter are counted (one rank per thread in the thread backend).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "dtensor/device_mesh.h"

namespace dt {

class CommCounter {
 public:
  struct Record {
    CollectiveKind kind;
    int64_t mesh_dim;  // -1: not one of the mesh's per-dim communicators (or no mesh given)
    int64_t bytes;     // per-rank input bytes (the benchmarks' size convention)
    int group_size;
  };

  explicit CommCounter(std::optional<DeviceMesh> mesh = std::nullopt);
  ~CommCounter();
  CommCounter(const CommCounter&) = delete;
  CommCounter& operator=(const CommCounter&) = delete;

  int64_t count(CollectiveKind kind) const;
  int64_t count(CollectiveKind kind, int64_t mesh_dim) const;
  int64_t total() const;
  int64_t bytes(CollectiveKind kind) const;
  std::vector<Record> records() const;
  void reset();
  // "all_gather: 2 (mesh dim 1: 2), 96 B; all_reduce: 1 ..." or "no collectives".
  std::string summary() const;

 private:
  std::optional<DeviceMesh> mesh_;
  std::thread::id thread_;
  int observer_id_ = -1;
  mutable std::mutex mu_;
  std::vector<Record> records_;
};

}  // namespace dt
