// Matrix products on DTensors.
//
// matmul follows torch.matmul (1-d operands, broadcast batch dims). Per mesh dim it runs without communication
// when the inputs are sharded in one of these ways (R = Replicate):
//   batch dim:   a S(batch), b S(batch) or R where b broadcasts that dim          -> S(batch)
//   rows / cols: a S(rows), b R -> S(rows);  a R, b S(cols) -> S(cols)
//   contracting: a S(k), b S(k) -> P(sum)
//   Partial:     P(sum) @ R -> P(sum), R @ P(sum) -> P(sum) (likewise avg)
// Anything else is redistributed to the cheapest of these first.
//
// linear(x, w, b) = x @ w^T + b with w in torch's [out, in] layout:
//   x S(batch), w R, b R -> S(batch);  x R, w S(0), b S(0) -> S(last) (column parallel)
//   x S(last), w S(1) -> P(sum) (row parallel): the bias is taken as P(sum), i.e. only coordinate 0 of the mesh
//   dim adds it (an R bias is converted locally, without communication); P(sum) x or w likewise.
#pragma once

#include "dtensor/dtensor.h"

namespace dt {

DTensor matmul(const DTensor& a, const DTensor& b);
DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias = DTensor());

}  // namespace dt
