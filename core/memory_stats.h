// Memory accounting per device and per kind: how many bytes the storages of this process hold now and at their peak,
// split into parameters, gradients, optimizer state, communication buffers and activations (everything else).
//
// Note [Memory kinds]
// A Storage is charged to the kind current on its thread when it is created (MemoryKindScope; activations when no
// scope is open) and keeps that kind when it is released and re-filled, so an FSDP unsharded parameter stays
// "unsharded parameters" across steps. Code that turns a storage into something else (a computed tensor that
// becomes a gradient) moves its bytes with Storage::set_memory_kind. Counted are the bytes a storage owns (the size
// asked for, not the pool's rounded block; wrapped memory is not counted), so the figures are what the program holds,
// not what the caching pool keeps (Allocator::cached_bytes says that). The counters are atomics, updated on every
// create, resize, release and destruction of an owning storage; each kind's peak and the total's own peak follow
// every change, so the total's peak is the highest sum ever held, not the sum of the kinds' peaks. The total is the
// sum of the kinds read at each allocation (one atomic addition per change, not two: the locked addition is what
// counting costs), so while threads allocate and free at the same moment the total's peak may be off by the bytes
// they change meanwhile; the kinds' figures and the current total are exact once they are done.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace dt {

enum class MemoryKind : uint8_t {
  kActivations = 0,  // everything not tagged otherwise
  kParameters,
  kUnshardedParameters,
  kGradients,
  kOptimizerState,
  kCommBuffers,
  kCount
};
constexpr size_t kMemoryKinds = size_t(MemoryKind::kCount);

// "activations", "parameters", "unsharded parameters", "gradients", "optimizer state", "communication buffers".
const char* memory_kind_name(MemoryKind kind);

// Storages created on this thread while a scope lives are charged to `kind` (scopes nest; the innermost wins).
class MemoryKindScope {
 public:
  explicit MemoryKindScope(MemoryKind kind);
  ~MemoryKindScope();
  MemoryKindScope(const MemoryKindScope&) = delete;
  MemoryKindScope& operator=(const MemoryKindScope&) = delete;

 private:
  MemoryKind previous_;
};

// The kind storages created now on this thread are charged to.
MemoryKind current_memory_kind();

struct MemoryUsage {
  std::array<int64_t, kMemoryKinds> current{}, peak{};  // bytes, per kind
  int64_t total_current = 0, total_peak = 0;            // the sum of kinds now, and its own peak
  int64_t current_of(MemoryKind k) const { return current[size_t(k)]; }
  int64_t peak_of(MemoryKind k) const { return peak[size_t(k)]; }
};

// Process-wide, per device (cpu, cuda:i).
MemoryUsage memory_usage(const Device& device);
// Every peak of `device` := its current value.
void reset_peak_memory(const Device& device);

// One line: "parameters 12.0 MiB (peak 12.0) · gradients ... · total 40.1 MiB (peak 55.0)"; kinds with a zero peak
// are left out; each figure in the unit of its peak (B, KiB, MiB, GiB).
std::string format_memory_usage(const MemoryUsage& usage);
// "12.5 MiB": bytes in MiB with one decimal, whatever the size (reports that line figures up in one unit).
std::string format_mib(double bytes);

// For Storage (core/storage.cc): `bytes` (negative: freed) owned by a storage of `kind` on `device`.
void count_memory(const Device& device, MemoryKind kind, int64_t bytes);
// Moves `bytes` held on `device` from kind `from` to kind `to` (the total does not change).
void move_memory(const Device& device, MemoryKind from, MemoryKind to, int64_t bytes);

}  // namespace dt
