// main() for GPU test binaries: exit 77 (reported as skipped by meson) when no GPU can be used.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/device.h"

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
  return RUN_ALL_TESTS();
}
