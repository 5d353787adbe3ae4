#include "dtensor/visualize.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "placement/layout.h"

namespace dt {

std::string visualize_sharding(const DTensor& tensor) {
  DT_CHECK_ARG(tensor.defined(), "visualize_sharding of an undefined DTensor");
  return visualize_sharding(tensor.shape(), tensor.mesh().shape(), tensor.spec());
}

std::string visualize_sharding(const Shape& global, const MeshShape& mesh, const ShardingSpec& spec) {
  DT_CHECK_ARG(global.size() == 1 || global.size() == 2, "visualize_sharding shows 1-d and 2-d tensors; got shape ",
               shape_str(global));
  const bool two_d = global.size() == 2;
  // Cell (row range, col range) -> ranks holding it.
  std::map<std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>>, std::vector<int64_t>> cells;
  std::set<std::pair<int64_t, int64_t>> rows, cols;
  for (int64_t r : mesh.ranks()) {
    auto ranges = local_ranges(global, mesh, spec, mesh.coordinate_of(r));
    std::pair<int64_t, int64_t> row{ranges[0].begin, ranges[0].end};
    std::pair<int64_t, int64_t> col = two_d ? std::make_pair(ranges[1].begin, ranges[1].end) : std::make_pair(0L, 1L);
    if (row.first == row.second || col.first == col.second) continue;  // empty shard: holds nothing
    cells[{row, col}].push_back(r);
    rows.insert(row);
    cols.insert(col);
  }
  std::ostringstream os;
  os << "Sharding of " << shape_str(global) << " (" << spec.to_string() << ") on " << mesh.to_string();
  if (spec.has_partial()) os << " [partial values: the ranks listed each hold a contribution]";
  os << ":\n";
  auto label = [](const char* what, std::pair<int64_t, int64_t> r) {
    return std::string(what) + " " + std::to_string(r.first) + ":" + std::to_string(r.second);
  };
  auto cell_text = [&](std::pair<int64_t, int64_t> row, std::pair<int64_t, int64_t> col) {
    auto it = cells.find({row, col});
    if (it == cells.end()) return std::string("-");
    std::string s;
    for (size_t i = 0; i < it->second.size(); ++i) s += (i ? "," : "") + ("r" + std::to_string(it->second[i]));
    return s;
  };
  size_t w0 = 0, wc = 1;
  for (auto& r : rows) w0 = std::max(w0, label(two_d ? "rows" : "elems", r).size());
  for (auto& r : rows)
    for (auto& c : cols) wc = std::max(wc, cell_text(r, c).size());
  for (auto& c : cols) wc = std::max(wc, two_d ? label("cols", c).size() : size_t(0));
  auto pad = [](std::string s, size_t w) { return s + std::string(w > s.size() ? w - s.size() : 0, ' '); };
  if (two_d) {
    os << pad("", w0);
    for (auto& c : cols) os << "  " << pad(label("cols", c), wc);
    os << "\n";
  }
  for (auto& r : rows) {
    os << pad(label(two_d ? "rows" : "elems", r), w0);
    for (auto& c : cols) os << "  " << pad(cell_text(r, c), wc);
    os << "\n";
  }
  if (rows.empty()) os << "(empty tensor)\n";
  return os.str();
}

}  // namespace dt
