// What the GPU test binaries' main (tests/gpu_test_main.cc) offers their tests.
#pragma once

#include <functional>
#include <type_traits>

namespace dt::test {

// Runs `release` after the tests ran, before main returns (the last registered first): objects the tests share
// across a binary (a process group, a communicator) are released there, while the CUDA runtime and NCCL still
// work, not in static destruction, where they may be gone.
void at_tests_end(std::function<void()> release);

// The object `make` returns, made on the first call from this call site and released at the tests' end:
//   CommunicatorPtr nccl_world() { return shared_until_tests_end([] { return init_process_group(kCUDA); }); }
template <typename Make>
std::invoke_result_t<Make> shared_until_tests_end(Make make) {
  static std::invoke_result_t<Make> object = [&] {
    at_tests_end([] { object = {}; });
    return make();
  }();
  return object;
}

}  // namespace dt::test
