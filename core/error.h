// Errors: every failure is a dt::Error with a code. Messages say what was expected, what was given and, once ranks
// exist, on which rank.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dt {

enum class ErrorCode {
  kInvalidArgument = 1,
  kUnsupported = 2,
  kTimeout = 3,
  kRemoteError = 4,
  kSystemError = 5,
  kCudaError = 6,
  kInternal = 7,
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define DT_ERROR_SUBCLASS_(Name, Code)                                             \
  class Name : public Error {                                                      \
   public:                                                                         \
    explicit Name(const std::string& message) : Error(ErrorCode::Code, message) {} \
  };
DT_ERROR_SUBCLASS_(InvalidArgument, kInvalidArgument)
DT_ERROR_SUBCLASS_(Unsupported, kUnsupported)
DT_ERROR_SUBCLASS_(TimeoutError, kTimeout)
DT_ERROR_SUBCLASS_(RemoteError, kRemoteError)
DT_ERROR_SUBCLASS_(SystemError, kSystemError)
DT_ERROR_SUBCLASS_(CudaError, kCudaError)
DT_ERROR_SUBCLASS_(InternalError, kInternal)
#undef DT_ERROR_SUBCLASS_

// The dt::Error subclass for `code` (InvalidArgument for kInvalidArgument, ...), as an exception_ptr: for errors
// stored on a Work or carried across threads with their code.
std::exception_ptr make_error(ErrorCode code, const std::string& message);

// Concatenates its arguments with operator<<.
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

}  // namespace dt

// Validates user input: throws dt::InvalidArgument with the concatenated message.
#define DT_CHECK_ARG(cond, ...)                                           \
  do {                                                                    \
    if (!(cond)) throw ::dt::InvalidArgument(::dt::str_cat(__VA_ARGS__)); \
  } while (0)

// Throws the given error type with the concatenated message.
#define DT_THROW(Type, ...) throw ::dt::Type(::dt::str_cat(__VA_ARGS__))

// Internal invariants only: a failure is a bug in dtensor, reported as dt::InternalError (never an abort).
#define DT_ASSERT(cond, ...)                                                                                       \
  do {                                                                                                             \
    if (!(cond))                                                                                                   \
      throw ::dt::InternalError(                                                                                   \
          ::dt::str_cat("internal invariant failed at ", __FILE__, ":", __LINE__, ": " #cond " ", ##__VA_ARGS__)); \
  } while (0)
