#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace dt {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t s : shape) overflow = __builtin_mul_overflow(n, s, &n) || overflow;
  // A zero size makes any product of the others harmless: only a non-empty shape can be too large.
  if (overflow) {
    for (int64_t s : shape)
      if (s == 0) return 0;
    DT_THROW(InvalidArgument, "shape ", shape_str(shape), " has more elements than an int64 can count");
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Only an empty shape's product can overflow (shape_numel refuses the others); its strides reach no element, so
    // they stop growing there instead of wrapping (to a negative stride, or UB).
    int64_t next;
    if (!__builtin_mul_overflow(s, std::max<int64_t>(shape[i], 1), &next)) s = next;
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what) {
  int64_t lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim - 1 : 0;
  DT_CHECK_ARG(dim >= lo && dim <= hi, what, " ", dim, " is out of range for a tensor with ", ndim, " dims (expected ",
               lo, "..", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

}  // namespace dt
