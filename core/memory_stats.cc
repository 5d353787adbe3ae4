#include "core/memory_stats.h"

#include <atomic>
#include <cstdio>

#include "core/error.h"

namespace dt {
namespace {

constexpr int kMaxCudaDevices = 64;

// One device's counters. Atomics, not a lock: this runs on every allocation and free, from any thread.
struct alignas(64) Counters {
  std::array<std::atomic<int64_t>, kMemoryKinds> current{}, peak{};
  std::atomic<int64_t> total_peak{0};
  // The sum of the kinds (no counter of its own: one atomic addition per change instead of two).
  int64_t total() const {
    int64_t sum = 0;
    for (const auto& v : current) sum += v.load(std::memory_order_relaxed);
    return sum;
  }
};

// Trivially destructible, so storages destroyed during static destruction still count safely.
constinit std::array<Counters, 1 + kMaxCudaDevices> g_counters{};

constinit thread_local MemoryKind t_kind = MemoryKind::kActivations;

bool device_in_range(const Device& device) {
  return device.is_cpu() || (device.index >= 0 && device.index < kMaxCudaDevices);
}

Counters& counters_of(const Device& device) {
  DT_ASSERT(device_in_range(device), "memory accounting covers cuda:0 to cuda:", kMaxCudaDevices - 1, ", not ", device);
  return g_counters[device.is_cpu() ? 0 : size_t(1 + device.index)];
}

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void check_kind(MemoryKind kind) {
  DT_CHECK_ARG(kind < MemoryKind::kCount, "memory kind ", int(kind), " does not exist: expected 0 to ",
               kMemoryKinds - 1);
}

// "12.0 MiB", "512 B": one decimal from KiB up.
std::string format_bytes(int64_t bytes, bool with_unit) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = double(bytes);
  while (unit < 4 && (value >= 1024 || value <= -1024)) {
    value /= 1024;
    ++unit;
  }
  char buf[48];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", value);
  }
  return with_unit ? std::string(buf) + " " + kUnits[unit] : std::string(buf);
}

// "12.0 MiB (peak 12.0)"; the peak's unit is named when it differs: "300 B (peak 1.5 KiB)".
std::string format_pair(int64_t current, int64_t peak) {
  const std::string now = format_bytes(current, true);
  const std::string top = format_bytes(peak, true);
  const bool same_unit = now.substr(now.rfind(' ')) == top.substr(top.rfind(' '));
  return now + " (peak " + (same_unit ? format_bytes(peak, false) : top) + ")";
}

}  // namespace

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kActivations:
      return "activations";
    case MemoryKind::kParameters:
      return "parameters";
    case MemoryKind::kUnshardedParameters:
      return "unsharded parameters";
    case MemoryKind::kGradients:
      return "gradients";
    case MemoryKind::kOptimizerState:
      return "optimizer state";
    case MemoryKind::kCommBuffers:
      return "communication buffers";
    case MemoryKind::kCount:
      break;
  }
  check_kind(kind);
  return "";
}

MemoryKindScope::MemoryKindScope(MemoryKind kind) : previous_(t_kind) {
  check_kind(kind);
  t_kind = kind;
}

MemoryKindScope::~MemoryKindScope() { t_kind = previous_; }

MemoryKind current_memory_kind() { return t_kind; }

void count_memory(const Device& device, MemoryKind kind, int64_t bytes) {
  if (bytes == 0) return;
  Counters& c = counters_of(device);
  const size_t k = size_t(kind);
  const int64_t now = c.current[k].fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (bytes > 0) {
    raise_peak(c.peak[k], now);
    raise_peak(c.total_peak, c.total());
  }
}

void move_memory(const Device& device, MemoryKind from, MemoryKind to, int64_t bytes) {
  if (bytes == 0 || from == to) return;
  Counters& c = counters_of(device);
  // Out of `from` first: a concurrent reader of the total may see less for a moment, never more.
  c.current[size_t(from)].fetch_sub(bytes, std::memory_order_relaxed);
  raise_peak(c.peak[size_t(to)], c.current[size_t(to)].fetch_add(bytes, std::memory_order_relaxed) + bytes);
}

MemoryUsage memory_usage(const Device& device) {
  DT_CHECK_ARG(device_in_range(device), "memory_usage: expected cpu or cuda:0 to cuda:", kMaxCudaDevices - 1, ", got ",
               device);
  const Counters& c = counters_of(device);
  MemoryUsage u;
  for (size_t k = 0; k < kMemoryKinds; ++k) {
    u.current[k] = c.current[k].load(std::memory_order_relaxed);
    u.peak[k] = c.peak[k].load(std::memory_order_relaxed);
  }
  u.total_current = c.total();
  u.total_peak = c.total_peak.load(std::memory_order_relaxed);
  return u;
}

void reset_peak_memory(const Device& device) {
  DT_CHECK_ARG(device_in_range(device), "reset_peak_memory: expected cpu or cuda:0 to cuda:", kMaxCudaDevices - 1,
               ", got ", device);
  Counters& c = counters_of(device);
  for (size_t k = 0; k < kMemoryKinds; ++k) c.peak[k].store(c.current[k].load(std::memory_order_relaxed));
  c.total_peak.store(c.total());
}

std::string format_mib(double bytes) {
  char b[48];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return b;
}

std::string format_memory_usage(const MemoryUsage& usage) {
  std::string out;
  for (size_t k = 0; k < kMemoryKinds; ++k) {
    if (usage.peak[k] == 0) continue;
    out += memory_kind_name(MemoryKind(k));
    out += ' ';
    out += format_pair(usage.current[k], usage.peak[k]);
    out += " · ";
  }
  return out + "total " + format_pair(usage.total_current, usage.total_peak);
}

}  // namespace dt
