// make_error: the dt::Error subclass for every code, carried as an exception_ptr.
#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

namespace dt {
namespace {

template <typename E>
void expect_made(ErrorCode code) {
  try {
    std::rethrow_exception(make_error(code, "the message"));
  } catch (const E& e) {
    EXPECT_EQ(e.code(), code);
    EXPECT_NE(std::string(e.what()).find("the message"), std::string::npos);
    return;
  } catch (...) {
  }
  ADD_FAILURE() << "make_error(" << error_code_name(code) << ") did not make the expected subclass";
}

TEST(MakeError, EveryCodeMakesItsSubclass) {
  expect_made<InvalidArgument>(ErrorCode::kInvalidArgument);
  expect_made<Unsupported>(ErrorCode::kUnsupported);
  expect_made<TimeoutError>(ErrorCode::kTimeout);
  expect_made<RemoteError>(ErrorCode::kRemoteError);
  expect_made<SystemError>(ErrorCode::kSystemError);
  expect_made<CudaError>(ErrorCode::kCudaError);
  expect_made<InternalError>(ErrorCode::kInternal);
}

}  // namespace
}  // namespace dt
