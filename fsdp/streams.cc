// The FSDP engine's streams (fsdp/streams.h).
#include "fsdp/streams.h"

#include <map>
#include <mutex>

#include "core/allocator.h"

namespace dt::fsdp {

EngineStreams engine_streams(const Device& device) {
  if (!device.is_cuda()) return {};
  static std::mutex mu;
  static std::map<int, EngineStreams> streams;  // made once per device, for the process's lifetime
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device.index);
  if (it == streams.end())
    it = streams.emplace(device.index, EngineStreams{create_stream(device), create_stream(device)}).first;
  return it->second;
}

void record_use(const Tensor& t, Stream stream) {
  if (t.defined() && t.storage() && stream.handle && t.device().is_cuda())
    allocator_for(t.device()).record_stream(t.storage()->data(), stream);
}

}  // namespace dt::fsdp
