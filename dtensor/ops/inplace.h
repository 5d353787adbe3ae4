// In-place updates of a DTensor's local block, for optimizers: x's placements, shard order and local storage never
// change (the local tensor is written in place: views of it and its data pointer stay valid). The other operand is
// broadcast to x's shape (dt::expand), brought to the spec the update needs (redistributed when it differs: a
// P(sum) y onto a Replicate x is reduced first) and converted to x's dtype on each rank.
//
//   add_(x, y, alpha)  x += alpha * y. y is brought to x's spec; on a Partial mesh dim of x the exact R -> P rule
//                      makes this right for sum (one coordinate adds y), avg, max and min; P(product) x: Unsupported.
//   mul_(x, y)         x *= y. On a P(sum)/P(avg) mesh dim of x, y must be Replicate there; on P(product), y is
//                      P(product) too; P(max)/P(min) x: Unsupported (the result depends on y's sign).
//   mul_(x, s)         x *= s. P(sum/avg) x and, for s >= 0, P(max/min) x stay exact; P(product) x: Unsupported.
//   copy_(x, src)      x = src: src is brought to x's spec, then its block is copied into x's local tensor.
#pragma once

#include "dtensor/dtensor.h"

namespace dt {

DTensor& add_(DTensor& x, const DTensor& y, double alpha = 1);
DTensor& mul_(DTensor& x, const DTensor& y);
DTensor& mul_(DTensor& x, double s);
DTensor& copy_(DTensor& x, const DTensor& src);

}  // namespace dt
