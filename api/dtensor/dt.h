// The C++ umbrella header of dtensor: everything a model author needs, in namespace dt.
//
//   #include <dtensor/dt.h>
//
//   dt::init_process_group();  // under dtrun, torchrun, mpirun or srun
//   auto mesh = dt::DeviceMesh::create(dt::DeviceType::kCPU, {2, 2}, {"dp", "tp"});
//   auto x = dt::distribute_tensor(full, mesh, {dt::Shard(0), dt::Replicate()});
//
// It lives in api/, the top layer, so that it may include every layer below it (the C API is its own header,
// <dtensor/c_api.h>, for C callers).
// It is installed as <dtensor/dt.h>, beside (not inside) the installed dtensor/ layer folder, so it is never
// confused with that folder's own headers. It includes no backend internals (no UCX, NCCL or CUDA headers): backends
// are reached through collectives/process_group.h.
#pragma once

#include "collectives/bootstrap.h"
#include "collectives/communicator.h"
#include "collectives/process_group.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/error_file.h"
#include "core/memory_stats.h"
#include "core/tensor.h"
#include "core/trace.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/comm_counter.h"
#include "dtensor/comm_debug.h"
#include "dtensor/device_mesh.h"
#include "dtensor/dtensor.h"
#include "dtensor/ops.h"
#include "dtensor/visualize.h"
#include "fsdp/fully_shard.h"
#include "fsdp/options.h"
#include "fsdp/param_group.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/matmul.h"
#include "nn/autograd.h"
#include "nn/checkpoint.h"
#include "nn/comm_debug.h"
#include "nn/layers.h"
#include "nn/models/generate.h"
#include "nn/models/gpt.h"
#include "nn/models/hf.h"
#include "nn/module.h"
#include "nn/ops.h"
#include "nn/optim.h"
#include "nn/parallel.h"
#include "nn/variable.h"
#include "placement/layout.h"
#include "placement/placement.h"
#include "placement/planner.h"
#include "placement/sharding_spec.h"
#include "train/config.h"
#include "train/loader.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/param_groups.h"
#include "train/resize.h"
#include "train/token_dataset.h"
