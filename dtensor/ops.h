// Every DTensor operator with sharding propagation (one header per family under dtensor/ops/). Each op picks the
// cheapest valid strategy for its inputs' placements, redistributes the inputs to it when needed, runs the local
// kernel (kernels/ops/) on every rank's blocks and returns DTensors with the strategy's output placements. The
// machinery (schemas, single-dim strategies, the dispatch funnel, implicit-redistribution policy) is in
// dtensor/ops/dispatch.h.
#pragma once

#include "dtensor/factory.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/dropout.h"
#include "dtensor/ops/elementwise.h"
#include "dtensor/ops/embedding.h"
#include "dtensor/ops/index.h"
#include "dtensor/ops/inplace.h"
#include "dtensor/ops/local_map.h"
#include "dtensor/ops/loss.h"
#include "dtensor/ops/matmul.h"
#include "dtensor/ops/norm.h"
#include "dtensor/ops/reduction.h"
#include "dtensor/ops/softmax.h"
#include "dtensor/ops/view.h"
