// Indexing ops on DTensors, torch semantics, and their backward ops (each a dispatched op choosing its own strategy).
//
// index_select(x, dim, index): index is 1-d integer. x sharded on another dim keeps that sharding; x sharded on
// `dim` is replicated on that dim first (the simple exact choice: a P(sum) path masked like the row-sharded
// embedding would save the gather but costs a reduction of the output, which is larger when the index repeats rows);
// a sharded index gives an output sharded on `dim`. Partial x passes through (the op only moves values).
// index_select_backward(grad, index, dim, size): zeros with `size` rows along `dim`, grad's slices added at `index`
// (index_add). A grad dim other than `dim` keeps its sharding; grad sharded on `dim` with the index sharded alike
// gives P(sum); P(sum) grad stays P(sum).
//
// gather(x, dim, index): torch.gather; index has x's ndim and index.size(d) <= x.size(d) for d != dim; the output has
// index's shape. A dim other than `dim` stays sharded when x and index are sharded alike on it and have the same
// size there; index sharded on `dim` gives an output sharded on `dim`; Partial x passes through.
// gather_backward(grad, index, dim, input_shape): zeros of input_shape with grad scatter-added at index.
//
// Indices outside the range are an InvalidArgument naming the op. Backward accumulation follows
// kernels::embedding_backward (float accumulation for f16/bf16, rounded once).
#pragma once

#include <cstdint>

#include "core/shape.h"
#include "dtensor/dtensor.h"

namespace dt {

DTensor index_select(const DTensor& x, int64_t dim, const DTensor& index);
DTensor index_select_backward(const DTensor& grad, const DTensor& index, int64_t dim, int64_t size);
DTensor gather(const DTensor& x, int64_t dim, const DTensor& index);
DTensor gather_backward(const DTensor& grad, const DTensor& index, int64_t dim, const Shape& input_shape);

}  // namespace dt
