// The one path every C entry point takes (Note [C API funnel]), and the conversions from C values to C++ ones.
//
// Note [C API funnel]
// Each entry point is `return capi::call("dt_x", [&] { ... });`: the body validates its arguments (null pointers,
// codes, counts) with the checks below, which throw dt::InvalidArgument naming the function and the argument, and
// runs; call() clears this thread's message, catches everything (dt::Error and its code, HandleError, bad_alloc,
// any std::exception, anything else), stores "dt_x: <message>" as this thread's message and returns the status.
// Out-parameters are written only at the end of a body, so a failure leaves them untouched.
#pragma once

#include <dtensor/c_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/c_api/handles.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "placement/sharding_spec.h"

namespace dt::capi {

void set_last_error(const std::string& message);
void clear_last_error();
dt_status_t status_of(ErrorCode code);

template <typename F>
dt_status_t call(const char* fn, F&& body) noexcept {
  try {
    clear_last_error();
    body();
    return DT_OK;
  } catch (const HandleError& e) {
    set_last_error(std::string(fn) + ": " + e.what());
    return DT_ERR_INVALID_HANDLE;
  } catch (const Error& e) {
    set_last_error(std::string(fn) + ": " + e.what());
    return status_of(e.code());
  } catch (const std::bad_alloc&) {
    set_last_error(std::string(fn) + ": out of memory");
    return DT_ERR_SYSTEM;
  } catch (const std::exception& e) {
    set_last_error(std::string(fn) + ": internal error: " + e.what());
    return DT_ERR_INTERNAL;
  } catch (...) {
    set_last_error(std::string(fn) + ": internal error: an unknown exception");
    return DT_ERR_INTERNAL;
  }
}

// A caller's growable parameter struct (it starts with struct_size), read over the defaults `init` fills: the fields
// its struct_size covers, while the others keep their defaults (an older caller's struct is shorter). NULL gives the
// defaults. InvalidArgument when struct_size covers no field past itself (it was not set).
template <typename P>
P read_params(const P* p, void (*init)(P*), const char* what, const char* init_name) {
  static_assert(offsetof(P, struct_size) == 0, "a growable parameter struct starts with struct_size");
  P q;
  init(&q);
  if (p == nullptr) return q;
  DT_CHECK_ARG(p->struct_size > sizeof(size_t), what, ".struct_size is ", p->struct_size,
               ": set it to the struct's sizeof (", init_name, " does)");
  std::memcpy(&q, p, std::min(p->struct_size, sizeof q));
  q.struct_size = sizeof q;
  return q;
}

// Throws InvalidArgument "<what> is NULL" when p is null.
void require(const void* p, const char* what);
// Throws InvalidArgument unless 0 <= n <= max (and p is non-null when n > 0).
void require_array(const void* p, int64_t n, int64_t max, const char* what);
// Communicating calls come from the thread that made the world (InvalidArgument otherwise).
void require_owner(const Owned& o, const char* fn);

DType to_dtype(int32_t code);
int32_t from_dtype(DType dtype);
Device to_device(const dt_device_t& d);
dt_device_t from_device(const Device& d);
ReduceOp to_reduce_op(int32_t code);
// The spec of n placements (n must be the mesh's ndim) for a tensor of tensor_ndim dims; orders from the `order`
// fields (all -1: the default).
ShardingSpec to_spec(const dt_placement_t* placements, int32_t n, int64_t mesh_ndim, int64_t tensor_ndim);
std::vector<dt_placement_t> from_spec(const ShardingSpec& spec);
// A non-owning Tensor over a caller's buffer (checked: dtype, ndim, shape, strides, data).
Tensor wrap_buffer(const dt_buffer_t* buffer, const char* what);
// Copies text into a caller's buffer (NUL-terminated, truncated to cap); needed (may be NULL) gets size + 1.
void copy_out(const std::string& text, char* buf, size_t cap, size_t* needed);
// Writes values into out[0..cap) (InvalidArgument when cap is too small).
void copy_ints(const std::vector<int64_t>& values, int64_t* out, int32_t cap, const char* what);

}  // namespace dt::capi
