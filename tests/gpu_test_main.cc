// main() for GPU test binaries: exit 77 (reported as skipped by meson) when no GPU can be used; releases what the
// tests shared (at_tests_end) before it returns.
#include "tests/gpu_test_main.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "core/device.h"

namespace dt::test {
namespace {
std::vector<std::function<void()>>& releases() {
  static std::vector<std::function<void()>> r;
  return r;
}
}  // namespace

void at_tests_end(std::function<void()> release) { releases().push_back(std::move(release)); }

}  // namespace dt::test

int main(int argc, char** argv) {
  if (!dt::cuda_available()) {
    std::printf("SKIPPED: no usable CUDA device in this process (built %s CUDA)\n",
#if defined(DT_WITH_CUDA)
                "with"
#else
                "without"
#endif
    );
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  auto& releases = dt::test::releases();
  while (!releases.empty()) {
    auto release = std::move(releases.back());
    releases.pop_back();
    release();
  }
  return rc;
}
