// The FSDP data paths' table (fsdp/data_path.h), in priority order.
#include "core/error.h"
#include "fsdp/data_path.h"
#include "fsdp/flat_path.h"
#include "fsdp/mapped_path.h"
#include "fsdp/segmented_path.h"

namespace dt::fsdp {

namespace {

constexpr uint32_t bit(Direction d) { return uint32_t(d); }
constexpr uint32_t kBoth = bit(Direction::kGather) | bit(Direction::kReduce);

struct PathDesc {
  const char* name;
  uint32_t directions;
  bool (*admits)(const GroupData&, Direction);
  std::unique_ptr<DataPath> (*make)(GroupData&);  // null: declined (the same on every rank)
};

const PathDesc kTable[] = {
    {"mapped", bit(Direction::kGather), MappedPath::admits, MappedPath::make},
    {"segmented", kBoth, SegmentedPath::admits, SegmentedPath::make},
    {"flat", kBoth, FlatPath::admits, FlatPath::make},
};

}  // namespace

std::unique_ptr<DataPath> select_data_path(GroupData& group, Direction direction) {
  for (const PathDesc& d : kTable) {
    if (!(d.directions & bit(direction)) || !d.admits(group, direction)) continue;
    if (std::unique_ptr<DataPath> path = d.make(group)) return path;
  }
  DT_ASSERT(false, "fsdp: no data path for group ", group.name);
  return nullptr;
}

}  // namespace dt::fsdp
