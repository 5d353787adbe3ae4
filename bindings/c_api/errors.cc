// Version, statuses and this thread's message.
#include <dtensor/c_api.h>

#include <string>

namespace dt::capi {
const std::string& last_error();
}

extern "C" {

uint32_t dt_version(void) {
  return (uint32_t(DT_C_API_VERSION_MAJOR) << 16) | (uint32_t(DT_C_API_VERSION_MINOR) << 8) |
         uint32_t(DT_C_API_VERSION_PATCH);
}

const char* dt_version_string(void) { return DT_C_API_VERSION_STRING; }

const char* dt_status_string(dt_status_t status) {
#define DT_STATUS_NAME_(s) \
  case s:                  \
    return #s;
  switch (status) {
    DT_STATUS_NAME_(DT_OK)
    DT_STATUS_NAME_(DT_ERR_INVALID_ARGUMENT)
    DT_STATUS_NAME_(DT_ERR_UNSUPPORTED)
    DT_STATUS_NAME_(DT_ERR_TIMEOUT)
    DT_STATUS_NAME_(DT_ERR_REMOTE)
    DT_STATUS_NAME_(DT_ERR_SYSTEM)
    DT_STATUS_NAME_(DT_ERR_CUDA)
    DT_STATUS_NAME_(DT_ERR_INTERNAL)
    DT_STATUS_NAME_(DT_ERR_INVALID_HANDLE)
  }
#undef DT_STATUS_NAME_
  return "unknown status";
}

const char* dt_last_error(void) { return dt::capi::last_error().c_str(); }

}  // extern "C"
