// Helpers of the thread-backend tests: deterministic inputs, an independent reference of the reductions, and a
// driver that runs many cases on one in-process world.
//
// Reference: the thread backend promises to fold the ranks' inputs in rank order, rounding every step to the dtype
// (16-bit floats computed in float), then to divide once for avg (integers: truncating). The reference below
// computes exactly that with its own scalar code, so results are compared exactly (as values: +0 == -0).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/thread/thread_comm.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/reduce_op.h"
#include "core/splitmix.h"

namespace dt::test {

inline uint64_t mix(uint64_t x) { return splitmix64(x); }

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Element i of the input with this seed. Values suit `op`: products stay small (no integer overflow, no float
// overflow), sums of floats are inexact so that rounding order matters.
template <typename T>
T gen(uint64_t seed, int64_t i, ReduceOp op = ReduceOp::kSum) {
  uint64_t h = mix(seed * 0x100000001b3ull ^ mix(uint64_t(i)));
  double u = double(h >> 11) * 0x1.0p-53;  // [0, 1)
  if constexpr (std::is_same_v<T, bool>) {
    return (h & 1) != 0;
  } else if constexpr (std::is_floating_point_v<T> || kIs16<T>) {
    if (op == ReduceOp::kProduct) return from_double<T>(((h & 1) ? -1.0 : 1.0) * (0.5 + 1.5 * u));
    return from_double<T>(u * 8.0 - 4.0);
  } else {
    int64_t lo, hi;
    if (op == ReduceOp::kProduct) {
      lo = std::is_signed_v<T> ? -2 : 1;
      hi = 2;
    } else if constexpr (sizeof(T) == 1) {
      lo = std::is_signed_v<T> ? -10 : 0;
      hi = std::is_signed_v<T> ? 10 : 20;
    } else {
      lo = -1000;
      hi = 1000;
    }
    int64_t v = lo + int64_t(h % uint64_t(hi - lo + 1));
    if (op == ReduceOp::kProduct && v == 0) v = 1;
    return T(v);
  }
}

template <typename T>
T ref_combine(ReduceOp op, T a, T b) {
  if constexpr (kIs16<T>) {
    float x = float(a), y = float(b);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return T(x + y);
      case ReduceOp::kProduct:
        return T(x * y);
      case ReduceOp::kMax:
        return x >= y ? a : b;
      case ReduceOp::kMin:
        return x <= y ? a : b;
    }
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        return T(a + b);
      case ReduceOp::kProduct:
        return T(a * b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kMin:
        return std::min(a, b);
    }
  }
  return a;
}

template <typename T>
T ref_avg(T sum, int n) {
  if constexpr (kIs16<T>) {
    return T(float(sum) / float(n));
  } else if constexpr (std::is_floating_point_v<T>) {
    return sum / T(n);
  } else {
    return T(int64_t(sum) / n);
  }
}

// A host array of T (std::vector<bool> has no data()).
template <typename T>
class HostBuf {
 public:
  HostBuf() = default;
  explicit HostBuf(size_t n) : n_(n), p_(std::make_unique<T[]>(n)) {}
  HostBuf(const T* first, const T* last) : HostBuf(size_t(last - first)) { std::copy(first, last, p_.get()); }
  HostBuf(const HostBuf& o) : HostBuf(o.begin(), o.end()) {}
  HostBuf& operator=(const HostBuf& o) {
    if (this != &o) *this = HostBuf(o.begin(), o.end());
    return *this;
  }
  HostBuf(HostBuf&&) noexcept = default;
  HostBuf& operator=(HostBuf&&) noexcept = default;
  T* data() { return p_.get(); }
  const T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_.get(); }
  T* end() { return p_.get() + n_; }
  const T* begin() const { return p_.get(); }
  const T* end() const { return p_.get() + n_; }

 private:
  size_t n_ = 0;
  std::unique_ptr<T[]> p_;
};

// Compares `count` values; returns "" or a message naming the first difference.
template <typename T>
std::string compare(const T* got, const T* want, int64_t count, const std::string& what) {
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < count; ++i)
    if (!(to_double(got[i]) == to_double(want[i]))) {
      if (first < 0) first = i;
      ++bad;
    }
  if (bad == 0) return "";
  return str_cat(what, ": ", bad, " of ", count, " elements differ; first at ", first, ": got ", to_double(got[first]),
                 ", expected ", to_double(want[first]));
}

// Per-rank byte buffers shared by the rank threads of one case (rank 0 fills them between two barriers).
struct Shared {
  std::vector<std::vector<std::byte>> in, expect;
  void resize(int n) {
    in.assign(size_t(n), {});
    expect.assign(size_t(n), {});
  }
  template <typename T>
  T* in_at(int r) {
    return reinterpret_cast<T*>(in[size_t(r)].data());
  }
  template <typename T>
  T* expect_at(int r) {
    return reinterpret_cast<T*>(expect[size_t(r)].data());
  }
  template <typename T>
  static void size_as(std::vector<std::byte>& v, int64_t count) {
    v.assign(size_t(count) * sizeof(T), std::byte{0});
  }
};

// Runs every case on a world of n ranks: rank 0 prepares the shared data, a barrier, every rank runs and checks
// its part (returning "" or a failure message). Failures are reported per case and rank. The shared data is double
// buffered: rank 0 prepares case k + 1 while the others may still check case k (whose buffers differ), and case
// k - 1's buffers are free once everyone passed case k's barrier.
struct CaseDriver {
  std::function<void(Shared&, int n)> prepare;                   // rank 0
  std::function<std::string(Communicator&, Shared&)> run_check;  // every rank
  std::string name;
};

inline void run_cases(int n, const std::vector<CaseDriver>& cases) {
  Shared shared[2];
  run_threads(n, [&](CommunicatorPtr comm) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const CaseDriver& c = cases[k];
      Shared& sh = shared[k % 2];
      if (comm->rank() == 0) {
        sh.resize(n);
        c.prepare(sh, n);
      }
      comm->barrier()->wait();
      std::string err = c.run_check(*comm, sh);
      EXPECT_EQ(err, "") << c.name << " on rank " << comm->rank() << " of " << n;
    }
  });
}

inline const std::vector<DType>& reduce_dtypes() {
  static const std::vector<DType> v = {DType::f32, DType::bf16, DType::f16, DType::f64,
                                       DType::i32, DType::i64,  DType::i8,  DType::u8};
  return v;
}
inline const std::vector<ReduceOp>& reduce_ops() {
  static const std::vector<ReduceOp> v = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                                          ReduceOp::kProduct};
  return v;
}
inline const std::vector<int64_t>& test_sizes() {
  static const std::vector<int64_t> v = {0, 1, 37, 100003};
  return v;
}

}  // namespace dt::test
