// A binary that links core without the kernels layer has no tensor engine (Note [The tensor engine] in
// core/device_ops.h): copies and fills fail with a clear error instead of taking another path.
#include <gtest/gtest.h>

#include <string>

#include "core/device_ops.h"
#include "core/tensor.h"

namespace dt {
namespace {

TEST(NoTensorEngine, CopiesAndFillsFailClearly) {
  Tensor a = Tensor::empty({2, 3});
  Tensor b = Tensor::empty({2, 3});
  try {
    a.copy_(b);
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("kernels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.fill_(1), InternalError);
  EXPECT_THROW(Tensor::zeros({4}), InternalError);
  EXPECT_THROW(a.t().contiguous(), InternalError);
  // Views and metadata need no engine.
  EXPECT_EQ(a.t().shape(), (Shape{3, 2}));
  EXPECT_TRUE(a.contiguous().is_contiguous());
}

}  // namespace
}  // namespace dt
