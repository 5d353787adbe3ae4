// Devices and streams. A Stream is an opaque handle (a cudaStream_t for CUDA, ignored on the CPU), so that layers
// above pass streams around without including CUDA headers.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace dt {

enum class DeviceType : uint8_t { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return Device{DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return Device{DeviceType::kCUDA, index}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;
  static Device parse(const std::string& s);  // "cpu", "cuda", "cuda:1"
};

std::ostream& operator<<(std::ostream& os, const Device& d);

struct Stream {
  void* handle = nullptr;  // cudaStream_t; nullptr: the thread's current stream (Note [Current streams], stream.h)
};

// Number of usable CUDA devices: 0 when built without CUDA or when no driver/GPU is present (never throws).
int cuda_device_count();
bool cuda_available();
// Throws dt::Unsupported with a clear message when `device` cannot be used in this process.
void check_device_usable(const Device& device);
// Blocks until all work queued on `stream` of `device` finished (no-op on the CPU).
void synchronize(const Device& device, Stream stream = {});
// Makes `device` the calling thread's current CUDA device and leaves it so (cudaSetDevice), as a rank's start does
// (torch.cuda.set_device): a CUDA mesh made by device type sets it. A no-op for the CPU.
void set_current_device(const Device& device);

// Makes `device` the calling thread's current CUDA device for the scope and restores the previous one after: the
// runtime API, NCCL and the kernels act on the current device, and a library call must not leave the caller's
// changed. A no-op for the CPU. Throws Unsupported / CudaError when the device cannot be made current.
class DeviceGuard {
 public:
  explicit DeviceGuard(const Device& device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace dt

template <>
struct std::hash<dt::Device> {
  size_t operator()(const dt::Device& d) const noexcept { return size_t(d.type) * 1315423911u + size_t(d.index); }
};
