#include "dtensor/checkpoint/prepare.h"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <random>
#include <set>

#include "collectives/exchange.h"
#include "core/error.h"
#include "placement/layout.h"

namespace dt::checkpoint {
namespace {

uint64_t fnv(uint64_t h, const void* p, size_t n) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 0x100000001b3ULL;
  return h;
}
uint64_t fnv(uint64_t h, const std::string& s) { return fnv(fnv(h, s.data(), s.size()), "\0", 1); }
uint64_t fnv(uint64_t h, const std::vector<int64_t>& v) {
  h = fnv(h, v.data(), v.size() * sizeof(int64_t));
  return fnv(h, "|", 1);
}

int64_t random_id() {
  std::random_device rd;
  const uint64_t a = (uint64_t(rd()) << 32) ^ rd();
  const uint64_t b = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return int64_t(a ^ (b * 0x9E3779B97F4A7C15ULL));
}

}  // namespace

Prepared prepare(const std::string& what, const TensorList& tensors, int64_t salt) {
  DT_CHECK_ARG(!tensors.empty(), what, ": no tensors given");
  Prepared p;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    DT_CHECK_ARG(!name.empty(), what, ": a tensor has an empty name");
    DT_CHECK_ARG(name != "__metadata__", what, ": '__metadata__' is not a tensor name safetensors allows");
    DT_CHECK_ARG(names.insert(name).second, what, ": tensor '", name, "' is given twice");
    DT_CHECK_ARG(t.defined(), what, ": tensor '", name, "' is undefined");
    if (!p.world) p.world = t.mesh().world();
    DT_CHECK_ARG(p.world != nullptr, what, ": tensor '", name, "' is on a mesh without a world communicator");
    DT_CHECK_ARG(t.mesh().world() == p.world, what, ": tensor '", name, "' is on a mesh of another world than '",
                 tensors.front().first, "'");
  }
  uint64_t h = fnv(0xcbf29ce484222325ULL, std::vector<int64_t>{salt});
  for (const auto& [name, t] : tensors) {
    DTensor v = t;
    if (t.spec().has_partial()) {  // collective over its mesh, in the order given on every rank
      ShardingSpec s = t.spec();
      for (int64_t m = 0; m < s.mesh_ndim(); ++m)
        if (is_partial(s[m])) s = s.with_placement(m, Replicate{});
      v = t.redistribute(s);
    }
    p.tensors.push_back({name, v.dtype(), v.shape(), v.spec()});
    p.values.push_back(std::move(v));
    h = fnv(h, name);
    h = fnv(h, std::string(dtype_name(t.dtype())));
    h = fnv(h, t.shape());
  }
  const std::vector<int64_t> agreed = all_gather_ints(*p.world, {int64_t(h), random_id()});
  std::string differ;
  for (int64_t r = 1; r < p.world->size(); ++r)
    if (agreed[size_t(2 * r)] != agreed[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  DT_CHECK_ARG(differ.empty(), what, ": rank ", differ,
               " passed other tensors than rank 0 (names, order, dtypes, shapes, placements or meshes differ)");
  char id[17];
  std::snprintf(id, sizeof id, "%016" PRIx64, uint64_t(agreed[1]));
  p.save_id = id;
  // Every rank's block of every tensor (offset and shape; empty outside the tensor's mesh): the writers are planned
  // from them, so tensors on different sub-meshes of different ranks (tp groups of a dp x tp mesh) dedupe too.
  std::vector<int64_t> mine;
  for (const DTensor& v : p.values) {
    const Shape off = v.local_offset();
    const Shape shape = v.mesh().is_member() ? v.to_local().shape() : Shape(v.shape().size(), 0);
    mine.insert(mine.end(), off.begin(), off.end());
    mine.insert(mine.end(), shape.begin(), shape.end());
  }
  const std::vector<int64_t> all = all_gather_ints(*p.world, mine);
  std::vector<std::vector<Box>> boxes(size_t(p.world->size()));
  for (size_t r = 0; r < boxes.size(); ++r) {
    size_t at = r * mine.size();
    for (const SavedTensor& t : p.tensors) {
      const size_t n = t.shape.size();
      Box b{Shape(all.begin() + long(at), all.begin() + long(at + n)),
            Shape(all.begin() + long(at + n), all.begin() + long(at + 2 * n))};
      at += 2 * n;
      boxes[r].push_back(std::move(b));
    }
  }
  p.plan = plan_writers(p.tensors, boxes);
  // The blocks must tile each tensor (ranks that passed different placements would not).
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& blocks = p.plan[i];
    std::vector<Box> boxes;
    int64_t covered = 0;
    for (const PlannedBlock& b : blocks) {
      boxes.push_back(b.box);
      covered += b.box.numel();
    }
    if (const auto pair = first_overlap(boxes))
      DT_THROW(InvalidArgument, what, ": tensor '", p.tensors[i].name, "': the blocks of ranks ",
               blocks[pair->first].writer, " and ", blocks[pair->second].writer,
               " overlap without being equal (did the ranks pass different placements?)");
    DT_CHECK_ARG(covered == shape_numel(p.tensors[i].shape), what, ": tensor '", p.tensors[i].name,
                 "': the ranks' blocks cover ", covered, " of its ", shape_numel(p.tensors[i].shape),
                 " elements (did the ranks pass different placements?)");
  }
  return p;
}

Tensor host_block(const DTensor& value, bool own) {
  const Tensor& local = value.to_local();
  Tensor host = local.device().is_cpu() ? local.contiguous() : local.to(Device::cpu());
  if (own && host.shares_storage_with(local)) host = local.clone();
  return host;
}

}  // namespace dt::checkpoint
