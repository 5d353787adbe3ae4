// Shapes and small index helpers shared by every layer.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace dt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[4, 3]"
// Maps a possibly negative dim into [0, ndim); throws InvalidArgument naming `what` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what = "dim");
// Ceil division for non-negative a, positive b (without overflow, also for a near INT64_MAX).
constexpr int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace dt
