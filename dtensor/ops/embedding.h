// Embedding lookup on DTensors: ids (integer, any shape) index the rows of weight [V, D]. Per mesh dim:
//   ids S(d), weight R      -> S(d)          (data parallel over the ids)
//   ids R,    weight S(1)   -> S(last)       (column sharded table: each rank looks up its slice of every row)
//   ids R,    weight S(0)   -> P(sum)        (row sharded table: ids outside this rank's rows are masked locally
//                                             and give zero rows; the partial sums are reduced by the consumer)
//   ids R,    weight P(op)  -> P(op)         (a lookup only moves values)
// Every id must be in [0, V) (InvalidArgument otherwise, also on the row-sharded path).
#pragma once

#include "dtensor/dtensor.h"

namespace dt {

DTensor embedding(const DTensor& ids, const DTensor& weight);

}  // namespace dt
