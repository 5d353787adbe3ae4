// Process-group entry points: the world communicator for this launch (dtrun, torchrun, mpirun or srun), set as the
// default world (DeviceMesh::create uses it). Backend-neutral: the backends register themselves
// (collectives/backend_registry.h) and this header includes none of them.
//
//   dt::init_process_group();                       // == init_process_group(DeviceType::kCPU): UCX over shared
//                                                   //    memory / TCP / IB
//   dt::init_process_group(dt::DeviceType::kCUDA);  // NCCL on cuda:select_cuda_device(LOCAL_RANK, RANK, visible)
//   dt::init_process_group("ucx");                  // a backend by name
//   ...
//   dt::destroy_process_group();                    // before main returns
#pragma once

#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "core/device.h"

namespace dt {

// Reads the launcher's environment (init_from_env), connects to (or hosts) the job's store (connect_store), sets the
// log rank, builds the world over the first backend registered for `type` (kCPU: ucx; kCUDA: nccl), makes it the
// default world and returns it. Collective over the job. Throws dt::Unsupported when no backend serves `type` in this
// build (kCUDA without CUDA/NCCL) or the backend cannot run in this process (no usable GPU).
std::shared_ptr<Communicator> init_process_group(DeviceType type = DeviceType::kCPU);
// Whether a launcher started this process (a rank variable of dtrun, torchrun, mpirun or srun is set).
bool under_launcher();
// init_process_group(type) under a launcher; otherwise a world of this one process (rank 0 of 1), so that a program
// runs alone or under a launcher alike (tools/dttrain).
std::shared_ptr<Communicator> init_process_group_or_alone(DeviceType type = DeviceType::kCPU);
// The same with a backend by name; dt::InvalidArgument naming the registered backends when there is none of that
// name.
std::shared_ptr<Communicator> init_process_group(const std::string& backend);
// Overload for string literals (a `const char*` would otherwise be ambiguous).
inline std::shared_ptr<Communicator> init_process_group(const char* backend) {
  return init_process_group(std::string(backend));
}

// The same from explicit launch values instead of the environment (an embedding application with its own
// configuration: the C API's dt_init).
struct BootstrapEnv;  // collectives/bootstrap.h
std::shared_ptr<Communicator> init_process_group(const BootstrapEnv& env, const std::string& backend);

// Drops the default world and the job's store that init_process_group kept alive, now rather than during static
// destruction (when the CUDA runtime or the peers may already be gone). The world is destroyed here unless the
// caller still holds it (a DeviceMesh, a saved pointer): release those first. Call it on every rank after the last
// collective; calling it without a process group does nothing.
void destroy_process_group();

// The CUDA device a rank of this launch uses: local_rank modulo the devices visible to the process (one GPU per
// process, e.g. a per-rank CUDA_VISIBLE_DEVICES or Slurm's --gpus-per-task=1, sees one device: index 0), or rank
// modulo them when the launcher gave no local rank (local_rank < 0). Throws dt::InvalidArgument when
// visible_devices < 1 or rank < 0.
int select_cuda_device(int local_rank, int rank, int visible_devices);

// The GPU of a process for DeviceType::kCUDA (an NCCL world, a CUDA mesh over a host world): select_cuda_device
// over this process's visible devices. Throws dt::Unsupported, naming the call `what`, when no CUDA device is usable.
Device cuda_device_for(int local_rank, int rank, const char* what);
// cuda_device_for with the launcher's local rank from the environment (the rank when the environment names none).
Device default_cuda_device(int rank);

}  // namespace dt
