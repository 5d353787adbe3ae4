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

std::exception_ptr make_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return std::make_exception_ptr(InvalidArgument(message));
    case ErrorCode::kUnsupported:
      return std::make_exception_ptr(Unsupported(message));
    case ErrorCode::kTimeout:
      return std::make_exception_ptr(TimeoutError(message));
    case ErrorCode::kRemoteError:
      return std::make_exception_ptr(RemoteError(message));
    case ErrorCode::kSystemError:
      return std::make_exception_ptr(SystemError(message));
    case ErrorCode::kCudaError:
      return std::make_exception_ptr(CudaError(message));
    case ErrorCode::kInternal:
      return std::make_exception_ptr(InternalError(message));
  }
  return std::make_exception_ptr(InternalError(message));
}

}  // namespace dt
