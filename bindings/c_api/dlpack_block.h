// A local block in and out as a DLPack tensor (DLManagedTensorVersioned): the one conversion the C API's DLPack
// entry points (bindings/c_api/dlpack.cc) and the FSDP engine's hand-offs (bindings/c_api/fsdp.cc) share.
#pragma once

#include <dtensor/c_api.h>

#include "core/tensor.h"

namespace dt::capi {

// `block` as a new DLPack tensor the caller owns (its deleter releases the block's storage); flags: DT_DLPACK_COPY
// (a copy), DT_DLPACK_READ_ONLY.
DLManagedTensorVersioned* export_block(const Tensor& block, uint32_t flags);

// The producer's tensor as a block, taking `local` over: its deleter runs exactly once on every path (when the
// block's storage goes, or at once when the block is a copy: `copy`, a non-contiguous or read-only tensor).
Tensor import_block(DLManagedTensorVersioned* local, bool copy);

}  // namespace dt::capi
