// /proc readers for the UCX worker (internal to collectives/ucx): whether a peer process on this host is alive.
#pragma once

#include <cstdint>
#include <string>

namespace dt::ucx {

// The first line of a file ("" when it cannot be read).
std::string read_first_line(const std::string& path);
// /proc/<pid>/stat: state (field 3) and start time (field 22). False when the process does not exist.
bool read_proc_stat(int64_t pid, char* state, uint64_t* start_time);
// "" when the process (pid, start time) is alive, else why it is not.
std::string process_dead_reason(int64_t pid, uint64_t start_time);

}  // namespace dt::ucx
