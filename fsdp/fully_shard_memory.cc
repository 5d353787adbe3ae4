// FSDP's memory report (fsdp/fully_shard_memory.h; Note [FSDP memory theory]).
#include "fsdp/fully_shard_memory.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "fsdp/fully_shard.h"

namespace dt::fsdp {

namespace {

// The sum of the `n` largest values.
int64_t largest(std::vector<int64_t> v, size_t n) {
  std::sort(v.rbegin(), v.rend());
  int64_t s = 0;
  for (size_t i = 0; i < std::min(n, v.size()); ++i) s += v[i];
  return s;
}

}  // namespace

MemoryReport memory_report(const nn::Module& root) {
  MemoryReport r;
  std::vector<int64_t> gathered, grads, gather_buf, reduce_buf;
  int64_t root_gathered = 0;
  Device device = Device::cpu();
  auto& self = const_cast<nn::Module&>(root);
  for (auto& [fqn, m] : self.named_modules()) {
    auto s = fsdp_state_of(*m);
    if (!s) continue;
    ParamGroup& g = FsdpModule(s).param_group();
    device = g.mesh().device();
    if (fqn.empty()) {
      root_gathered = g.unsharded_bytes();
    } else {
      gathered.push_back(g.unsharded_bytes());
    }
    grads.push_back(g.unsharded_grad_bytes());
    gather_buf.push_back(g.gather_buffer_bytes());
    reduce_buf.push_back(g.reduce_buffer_bytes());
  }
  r.usage = memory_usage(device);
  // The gradient shards are the parameters' size (in their dtype): twice the parameters, plus optimizer state.
  r.sharded_states = 2 * r.usage.current_of(MemoryKind::kParameters) + r.usage.current_of(MemoryKind::kOptimizerState);
  r.gathered_params = root_gathered + largest(gathered, 2);
  r.unsharded_grads = largest(grads, 1);
  r.comm_buffers = largest(gather_buf, 2) + largest(reduce_buf, 2);
  r.activations = r.usage.peak_of(MemoryKind::kActivations);
  return r;
}

std::string MemoryReport::to_string() const {
  const int64_t t = theory();
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2fx", t > 0 ? double(usage.total_peak) / double(t) : 0.0);
  return "peak " + format_mib(usage.total_peak) + " = " + ratio + " theory " + format_mib(t) + " (sharded states " +
         format_mib(sharded_states) + ", gathered " + format_mib(gathered_params) + ", unsharded grads " +
         format_mib(unsharded_grads) + ", comm " + format_mib(comm_buffers) + ", activations " +
         format_mib(activations) + "); " + format_memory_usage(usage);
}

}  // namespace dt::fsdp
