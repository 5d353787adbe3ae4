// FSDP copy-in and copy-out between N tensors and one flat buffer.
//
// chunk_cat (copy-in): region i of the flat buffer `out` receives inputs[i]'s elements in row-major order (inputs
// may be non-contiguous and of any sizes), followed by zeros up to padded_numels[i] elements. Region i starts where
// region i-1 ends; with padded_numels empty every region is exactly its input's numel. This is the all-gather
// input of a parameter group (this rank's shards, each padded to its chunk size) or, with narrowed views of the
// gradients as inputs, the reduce-scatter input.
// split_copy (copy-out): the inverse; outputs[i] receives the first outputs[i].numel() elements of region i (the
// padding is skipped).
// The buffer's dtype may differ from the tensors' (mixed precision): elements are converted by the rules of
// kernels/convert.h. Pointers live on `device`; CUDA work is queued on `stream`, CPU work runs synchronously.
// Nothing may overlap. The view versions allocate nothing.
#pragma once

#include <cstdint>
#include <span>

#include "core/device.h"
#include "core/tensor.h"
#include "kernels/strided_view.h"

namespace dt::kernels {

void chunk_cat(std::span<const StridedView> inputs, void* out, DType out_dtype, std::span<const int64_t> padded_numels,
               Device device, Stream stream = {});
void split_copy(const void* in, DType in_dtype, std::span<const int64_t> padded_numels,
                std::span<const StridedView> outputs, Device device, Stream stream = {});

// Tensor versions: `out` / `in` is a contiguous tensor of exactly the total number of elements, on the device of
// every input / output.
void chunk_cat(std::span<const Tensor> inputs, const Tensor& out, std::span<const int64_t> padded_numels = {},
               Stream stream = {});
void split_copy(const Tensor& in, std::span<const Tensor> outputs, std::span<const int64_t> padded_numels = {},
                Stream stream = {});

// Total elements of the flat buffer: the sum of the regions' sizes. Validates like chunk_cat.
int64_t chunk_cat_numel(std::span<const StridedView> views, std::span<const int64_t> padded_numels);

// Validates the views (written ones: no stride-0 dims) and the padded sizes; `what` names the call. Returns the
// total like chunk_cat_numel.
int64_t check_chunk_cat_args(std::span<const StridedView> views, std::span<const int64_t> padded_numels,
                             bool views_written, const char* what);

namespace cpu {
void chunk_cat(std::span<const StridedView> inputs, void* out, DType out_dtype, std::span<const int64_t> padded_numels);
void split_copy(const void* in, DType in_dtype, std::span<const int64_t> padded_numels,
                std::span<const StridedView> outputs);
}  // namespace cpu

namespace cuda {
void chunk_cat(std::span<const StridedView> inputs, void* out, DType out_dtype, std::span<const int64_t> padded_numels,
               Stream stream);
void split_copy(const void* in, DType in_dtype, std::span<const int64_t> padded_numels,
                std::span<const StridedView> outputs, Stream stream);
}  // namespace cuda

}  // namespace dt::kernels
