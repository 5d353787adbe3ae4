#include "kernels/chunk_cat.h"

#include <algorithm>
#include <array>

#include "core/allocator.h"
#include "core/error.h"

namespace dt::kernels {

int64_t check_chunk_cat_args(std::span<const StridedView> views, std::span<const int64_t> padded_numels,
                             bool views_written, const char* what) {
  DT_CHECK_ARG(padded_numels.empty() || padded_numels.size() == views.size(), what, ": ", padded_numels.size(),
               " padded sizes given for ", views.size(), " tensors (expected one per tensor, or none)");
  int64_t total = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views_written)
      check_writable_view(views[i], what);
    else
      check_view(views[i], what);
    int64_t n = views[i].numel();
    if (!padded_numels.empty()) {
      DT_CHECK_ARG(padded_numels[i] >= n, what, ": tensor ", i, " has ", n, " elements, more than its padded size ",
                   padded_numels[i]);
      n = padded_numels[i];
    }
    total += n;
  }
  return total;
}

int64_t chunk_cat_numel(std::span<const StridedView> views, std::span<const int64_t> padded_numels) {
  return check_chunk_cat_args(views, padded_numels, false, "chunk_cat_numel");
}

void chunk_cat(std::span<const StridedView> inputs, void* out, DType out_dtype, std::span<const int64_t> padded_numels,
               Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  int64_t total = check_chunk_cat_args(inputs, padded_numels, false, "chunk_cat");
  DT_CHECK_ARG(out || total == 0, "chunk_cat: null output buffer for ", total, " elements");
  if (total == 0) return;
  if (device.is_cpu()) return cpu::chunk_cat(inputs, out, out_dtype, padded_numels);
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::chunk_cat(inputs, out, out_dtype, padded_numels, stream);
#else
  (void)out_dtype;
  (void)stream;
  DT_THROW(Unsupported, "chunk_cat on ", device, ": dtensor was built without CUDA");
#endif
}

void split_copy(const void* in, DType in_dtype, std::span<const int64_t> padded_numels,
                std::span<const StridedView> outputs, Device device, Stream stream) {
  const StreamUseScope stream_use(device, stream);
  int64_t total = check_chunk_cat_args(outputs, padded_numels, true, "split_copy");
  DT_CHECK_ARG(in || total == 0, "split_copy: null input buffer for ", total, " elements");
  if (total == 0) return;
  if (device.is_cpu()) return cpu::split_copy(in, in_dtype, padded_numels, outputs);
#if defined(DT_WITH_CUDA)
  DeviceGuard guard(device);  // the buffers' device, not the thread's current one
  return cuda::split_copy(in, in_dtype, padded_numels, outputs, stream);
#else
  (void)in_dtype;
  (void)stream;
  DT_THROW(Unsupported, "split_copy on ", device, ": dtensor was built without CUDA");
#endif
}

namespace {
// The tensor versions convert tensors to views in fixed-size batches on the stack (no allocation) and run the
// view version once per batch, on the matching slice of the flat buffer.
constexpr size_t kTensorBatch = 32;

template <typename Fn>
void for_each_batch(std::span<const Tensor> tensors, std::span<const int64_t> padded_numels, const Tensor& flat,
                    const char* what, Fn&& fn) {
  DT_CHECK_ARG(flat.defined(), what, ": undefined flat buffer");
  DT_CHECK_ARG(flat.is_contiguous(), what, ": the flat buffer must be contiguous, got shape ", shape_str(flat.shape()),
               " strides ", shape_str(flat.strides()));
  DT_CHECK_ARG(padded_numels.empty() || padded_numels.size() == tensors.size(), what, ": ", padded_numels.size(),
               " padded sizes given for ", tensors.size(), " tensors (expected one per tensor, or none)");
  Device device = flat.device();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    DT_CHECK_ARG(tensors[i].defined(), what, ": tensor ", i, " is undefined");
    DT_CHECK_ARG(tensors[i].device() == device, what, ": tensor ", i, " is on ", tensors[i].device(),
                 " but the flat buffer is on ", device);
    DT_CHECK_ARG(padded_numels.empty() || padded_numels[i] >= tensors[i].numel(), what, ": tensor ", i, " has ",
                 tensors[i].numel(), " elements, more than its padded size ", padded_numels[i]);
    total += padded_numels.empty() ? tensors[i].numel() : padded_numels[i];
  }
  DT_CHECK_ARG(flat.numel() == total, what, ": the flat buffer has ", flat.numel(), " elements, the tensors need ",
               total);
  char* base = total > 0 ? static_cast<char*>(flat.data_ptr()) : nullptr;
  int64_t offset = 0;
  std::array<StridedView, kTensorBatch> views;
  for (size_t first = 0; first < tensors.size(); first += kTensorBatch) {
    size_t n = std::min(kTensorBatch, tensors.size() - first);
    int64_t batch_numel = 0;
    for (size_t j = 0; j < n; ++j) {
      views[j] = view_of(tensors[first + j]);
      batch_numel += padded_numels.empty() ? views[j].numel() : padded_numels[first + j];
    }
    std::span<const int64_t> pads = padded_numels.empty() ? padded_numels : padded_numels.subspan(first, n);
    fn(std::span<const StridedView>(views.data(), n), base ? base + offset * int64_t(flat.element_size()) : nullptr,
       pads, device);
    offset += batch_numel;
  }
}
}  // namespace

void chunk_cat(std::span<const Tensor> inputs, const Tensor& out, std::span<const int64_t> padded_numels,
               Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(out), stream);
  for_each_batch(inputs, padded_numels, out, "chunk_cat",
                 [&](std::span<const StridedView> views, char* flat, std::span<const int64_t> pads, Device device) {
                   chunk_cat(views, flat, out.dtype(), pads, device, stream);
                 });
}

void split_copy(const Tensor& in, std::span<const Tensor> outputs, std::span<const int64_t> padded_numels,
                Stream stream) {
  const StreamUseScope stream_use(device_or_cpu(in), stream);
  for_each_batch(outputs, padded_numels, in, "split_copy",
                 [&](std::span<const StridedView> views, char* flat, std::span<const int64_t> pads, Device device) {
                   split_copy(flat, in.dtype(), pads, views, device, stream);
                 });
}

}  // namespace dt::kernels
