// libFuzzer target: the C API's argument parsing and pure queries (dt_placements_parse / _format, dt_layout_block,
// dt_plan_describe) on arbitrary bytes. Every call must return a status with a message, never crash, hang or
// leak; on success the results must be consistent (text round trips, blocks inside the tensor).
#include <dtensor/c_api.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant failed: %s\n", what);
    std::abort();
  }
}

// A status is valid and a failure leaves a message.
void check_status(dt_status_t s) {
  check(s >= DT_OK && s <= DT_ERR_INVALID_HANDLE, "a known status");
  check(s == DT_OK || std::strlen(dt_last_error()) > 0, "a failure leaves a message");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  // Byte 0: tensor ndim for parsing (-1..8); byte 1: mesh ndim (0..4); bytes 2..: sizes; the rest: placement text.
  const int32_t tensor_ndim = int32_t(data[0] % 10) - 1;
  const int32_t mesh_ndim = int32_t(data[1] % 5);
  size_t pos = 2;
  int64_t mesh_sizes[4] = {1, 1, 1, 1}, shape[8] = {0}, coord[4] = {0};
  for (int32_t m = 0; m < mesh_ndim && pos < size; ++m) mesh_sizes[m] = 1 + data[pos++] % 6;
  for (int32_t d = 0; d < 8 && pos < size; ++d) shape[d] = data[pos++] % 40;
  for (int32_t m = 0; m < mesh_ndim && pos < size; ++m)
    coord[m] = data[pos++] % (mesh_sizes[m] + 1);  // may be out of range
  const std::string text(reinterpret_cast<const char*>(data + pos), size - pos);

  dt_placement_t ps[16];
  int32_t n = 0;
  dt_status_t s = dt_placements_parse(text.c_str(), tensor_ndim, ps, 16, &n);
  check_status(s);
  if (s == DT_OK) {
    check(n >= 0 && n <= 16, "a count within the room given");
    char buf[512];
    size_t needed = 0;
    s = dt_placements_format(ps, n, buf, sizeof buf, &needed);
    check_status(s);
    if (s == DT_OK && needed <= sizeof buf) {
      dt_placement_t again[16];
      int32_t m = 0;
      check(dt_placements_parse(buf, tensor_ndim, again, 16, &m) == DT_OK, "formatted placements parse");
      check(m == n && std::memcmp(again, ps, sizeof(dt_placement_t) * size_t(n)) == 0, "text round trip");
    }
  } else {
    // Raw structs straight from the bytes: unknown kinds, dims and orders must be refused, not trusted.
    n = int32_t(std::min<size_t>((size - pos) / sizeof(dt_placement_t), 4));
    std::memcpy(ps, data + pos, sizeof(dt_placement_t) * size_t(n));
  }
  const int32_t ndim = tensor_ndim < 0 ? 2 : tensor_ndim;
  if (n == mesh_ndim) {
    int64_t local[8], offset[8];
    s = dt_layout_block(shape, ndim, mesh_sizes, mesh_ndim, ps, coord, local, offset);
    check_status(s);
    if (s == DT_OK)
      for (int32_t d = 0; d < ndim; ++d)
        check(local[d] >= 0 && offset[d] >= 0 && offset[d] + local[d] <= shape[d], "a block inside the tensor");
    dt_placement_t to[4];
    for (int32_t m = 0; m < mesh_ndim; ++m) to[m] = dt_placement_t{DT_REPLICATE, 0, 0, -1};
    char plan[4096];
    s = dt_plan_describe(shape, ndim, mesh_sizes, mesh_ndim, ps, to, int32_t(data[0] % 12), plan, sizeof plan, nullptr);
    check_status(s);
  }
  return 0;
}
