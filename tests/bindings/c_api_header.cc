// The C header compiles as C++ with every warning an error (-Wall -Wextra -pedantic), its declarations link, and
// its version is the library's and the project's.
#include <dtensor/c_api.h>

#include <cstdio>
#include <cstring>

int main() {
  // A C++ caller sees the same ABI: a status from every call, static strings, a thread-local message.
  dt_comm_t world = nullptr;
  const dt_status_t s = dt_comm_rank(world, nullptr);
  if (s != DT_ERR_INVALID_HANDLE || std::strstr(dt_last_error(), "NULL communicator handle") == nullptr) {
    std::printf("unexpected: %s %s\n", dt_status_string(s), dt_last_error());
    return 1;
  }
  // The version: the header's, the library's and meson.build's project version (passed by the build) are one.
  const unsigned expected = (DT_C_API_VERSION_MAJOR << 16) | (DT_C_API_VERSION_MINOR << 8) | DT_C_API_VERSION_PATCH;
  if (std::strcmp(dt_version_string(), DT_TEST_PROJECT_VERSION) != 0 ||
      std::strcmp(DT_C_API_VERSION_STRING, DT_TEST_PROJECT_VERSION) != 0 || dt_version() != expected) {
    std::printf("unexpected version: library %s (%u), header %s, project %s\n", dt_version_string(), dt_version(),
                DT_C_API_VERSION_STRING, DT_TEST_PROJECT_VERSION);
    return 1;
  }
  std::printf("C API %s from C++: ok\n", dt_version_string());
  return 0;
}
