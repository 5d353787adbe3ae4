// Process-group entry points by device type: the world communicator for this launch (dtrun, torchrun, mpirun or
// srun), set as the default world (DeviceMesh::create uses it).
//
//   dt::init_process_group(dt::DeviceType::kCPU);   // UCX over shared memory / TCP / IB (== init_process_group())
//   dt::init_process_group(dt::DeviceType::kCUDA);  // NCCL on cuda:LOCAL_RANK
#pragma once

#include <memory>

#include "collectives/communicator.h"
#include "collectives/ucx/ucx_communicator.h"
#include "core/device.h"

namespace dt {

// kCPU: the UCX world (see init_process_group() in collectives/ucx/ucx_communicator.h). kCUDA: an NCCL world on
// cuda:<local rank> (the launcher's LOCAL_RANK; rank modulo the visible device count when unknown), bootstrapped
// through the job's store. Throws dt::Unsupported when CUDA or NCCL is not available in this build or process.
std::shared_ptr<Communicator> init_process_group(DeviceType type);

}  // namespace dt
