// The C header compiles as C++ with every warning an error (-Wall -Wextra -pedantic), and its declarations link.
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
  std::printf("C API %s from C++: ok\n", dt_version_string());
  return 0;
}
