#include "core/error.h"

#include "core/logging.h"

namespace dt {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kRemoteError:
      return "remote error";
    case ErrorCode::kSystemError:
      return "system error";
    case ErrorCode::kCudaError:
      return "CUDA error";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(rank_prefix() + message), code_(code) {}

}  // namespace dt
