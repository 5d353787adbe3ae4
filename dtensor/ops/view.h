// Views and data movement on DTensors. Every placement moves with its dim; Partial passes through unchanged (these
// ops only move values). Results are exact bit for bit.
//
// reshape/view: the dims are grouped (each group of input dims has the product of a group of output dims); a Shard
// on a group's leading dim maps to the leading dim of the same group on the other side when every rank's chunk
// lines up (e.g. [6, 4] S(0) -> [24] on 2 or 3 ranks; not [5, 2] S(0) -> [10] on 2 ranks, whose chunks are rows
// 0-2 / 3-4 but elements 0-4 / 5-9). Otherwise the input is redistributed first (never a wrong layout,
// pytorch/pytorch#179502). A Shard on a non-leading dim of a group (e.g. [4, 6] S(1) -> [24]) is redistributed.
// view is reshape (DTensor ops are functional; the local result may or may not alias the input).
// squeeze of a sharded size-1 dim, narrow/cat/split along a sharded dim: that dim is replicated first.
// tril/triu keep any sharding (each rank shifts the diagonal by its block's offset).
#pragma once

#include <cstdint>
#include <vector>

#include "core/shape.h"
#include "dtensor/dtensor.h"

namespace dt {

DTensor reshape(const DTensor& x, const Shape& shape);  // one dim may be -1
DTensor view(const DTensor& x, const Shape& shape);
DTensor flatten(const DTensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
DTensor unflatten(const DTensor& x, int64_t dim, const Shape& sizes);
DTensor transpose(const DTensor& x, int64_t dim0, int64_t dim1);
DTensor permute(const DTensor& x, const std::vector<int64_t>& dims);
DTensor unsqueeze(const DTensor& x, int64_t dim);
DTensor squeeze(const DTensor& x, int64_t dim);
DTensor squeeze(const DTensor& x);  // every size-1 dim
DTensor narrow(const DTensor& x, int64_t dim, int64_t start, int64_t length);
DTensor cat(const std::vector<DTensor>& tensors, int64_t dim = 0);
std::vector<DTensor> split(const DTensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<DTensor> split(const DTensor& x, int64_t split_size, int64_t dim = 0);  // torch.split with an int
DTensor tril(const DTensor& x, int64_t diagonal = 0);
DTensor triu(const DTensor& x, int64_t diagonal = 0);

// torch.Tensor.expand: -1 keeps a dim, new leading dims may be added, a size-1 dim may grow. A kept dim keeps its
// sharding; a sharded size-1 dim is replicated first; an expanded or new dim may come out Shard from a Replicate
// input (each rank materializes only its block). Partial passes through.
DTensor expand(const DTensor& x, const Shape& shape);
// torch.stack: tensors of one shape and dtype, a new dim at `dim`; a dim sharded alike in every input stays sharded.
DTensor stack(const std::vector<DTensor>& tensors, int64_t dim = 0);
// x[start:end:step] along dim, Python bounds (negative counts from the end, clamped), step >= 1. A sharded `dim` is
// replicated first; other dims keep their sharding; Partial passes through.
DTensor slice(const DTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
// slice's backward: zeros of input_shape with grad written at the sliced positions (same bounds as slice).
DTensor slice_backward(const DTensor& grad, const Shape& input_shape, int64_t dim, int64_t start, int64_t end,
                       int64_t step = 1);

}  // namespace dt
