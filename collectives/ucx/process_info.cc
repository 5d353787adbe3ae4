#include "collectives/ucx/process_info.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace dt::ucx {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

bool read_proc_stat(int64_t pid, char* state, uint64_t* start_time) {
  std::string line = read_first_line("/proc/" + std::to_string(pid) + "/stat");
  size_t close = line.rfind(')');
  if (line.empty() || close == std::string::npos) return false;
  std::istringstream is(line.substr(close + 1));
  std::string field;
  std::vector<std::string> f;
  while (is >> field) f.push_back(field);
  if (f.size() < 20) return false;
  *state = f[0].empty() ? '?' : f[0][0];
  *start_time = std::strtoull(f[19].c_str(), nullptr, 10);
  return true;
}

std::string process_dead_reason(int64_t pid, uint64_t start_time) {
  char state = '?';
  uint64_t st = 0;
  if (!read_proc_stat(pid, &state, &st)) return "its process " + std::to_string(pid) + " is gone";
  if (st != start_time) return "its process " + std::to_string(pid) + " is gone (the pid was reused)";
  if (state == 'Z' || state == 'X' || state == 'x')
    return "its process " + std::to_string(pid) + " exited or was killed";
  return "";
}

}  // namespace dt::ucx
