#include "dtensor/checkpoint/box.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace dt::checkpoint {

std::optional<Box> intersect(const Box& a, const Box& b) {
  DT_ASSERT(a.shape.size() == b.shape.size() && a.offset.size() == a.shape.size() && b.offset.size() == b.shape.size());
  Box out{Shape(a.shape.size()), Shape(a.shape.size())};
  for (size_t d = 0; d < a.shape.size(); ++d) {
    const int64_t lo = std::max(a.offset[d], b.offset[d]);
    const int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo) return std::nullopt;
    out.offset[d] = lo;
    out.shape[d] = hi - lo;
  }
  return out;
}

std::optional<std::pair<size_t, size_t>> first_overlap(const std::vector<Box>& boxes) {
  std::vector<size_t> order(boxes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto first_row = [&](size_t i) { return boxes[i].shape.empty() ? 0 : boxes[i].offset[0]; };
  auto end_row = [&](size_t i) { return boxes[i].shape.empty() ? 1 : boxes[i].offset[0] + boxes[i].shape[0]; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return first_row(a) < first_row(b); });
  std::vector<size_t> open;  // boxes whose rows reach past the current first row
  for (size_t i : order) {
    std::erase_if(open, [&](size_t j) { return end_row(j) <= first_row(i); });
    for (size_t j : open)
      if (intersect(boxes[i], boxes[j])) return std::make_pair(std::min(i, j), std::max(i, j));
    open.push_back(i);
  }
  return std::nullopt;
}

void for_each_run(const Box& part, const Box& src, const Box& dst,
                  const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  const int64_t n = int64_t(part.shape.size());
  if (part.numel() == 0) return;
  // Row-major strides of both blocks.
  std::vector<int64_t> ss(size_t(n) + 1, 1), ds(size_t(n) + 1, 1);
  for (int64_t d = n - 1; d >= 0; --d) {
    ss[size_t(d)] = ss[size_t(d) + 1] * src.shape[size_t(d)];
    ds[size_t(d)] = ds[size_t(d) + 1] * dst.shape[size_t(d)];
  }
  // The first dim from which everything inward is whole in all three: one run covers it and the dims inside.
  int64_t first = n;
  while (first > 0) {
    const size_t d = size_t(first - 1);
    if (part.shape[d] == src.shape[d] && part.shape[d] == dst.shape[d]) {
      --first;
    } else {
      break;
    }
  }
  // The run walks dim first - 1 (partly) and everything inside it; the dims outside it are enumerated.
  const int64_t outer_dims = first == 0 ? 0 : first - 1;
  int64_t len = 1;
  for (int64_t d = outer_dims; d < n; ++d) len *= part.shape[size_t(d)];
  std::vector<int64_t> idx(size_t(outer_dims), 0);
  while (true) {
    int64_t s = 0, t = 0;
    for (int64_t d = 0; d < n; ++d) {
      const int64_t g = part.offset[size_t(d)] + (d < outer_dims ? idx[size_t(d)] : 0);
      s += (g - src.offset[size_t(d)]) * ss[size_t(d) + 1];
      t += (g - dst.offset[size_t(d)]) * ds[size_t(d) + 1];
    }
    fn(s, t, len);
    int64_t d = outer_dims - 1;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < part.shape[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
    if (d < 0) break;
  }
}

}  // namespace dt::checkpoint
