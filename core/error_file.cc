#include "core/error_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "core/config.h"
#include "core/json_text.h"

namespace dt {

bool record_error(std::string_view what) {
  const std::optional<std::string> path = config::lookup("TORCHELASTIC_ERROR_FILE");
  if (!path || path->empty()) return false;
  std::string body = "{\"message\": {\"message\": \"";
  json::escape_into(body, what);
  body +=
      "\", \"extraInfo\": {\"py_callstack\": \"\", \"timestamp\": \"" + std::to_string(std::time(nullptr)) + "\"}}}\n";
  std::FILE* f = std::fopen(path->c_str(), "w");
  if (f == nullptr) {
    std::fprintf(stderr, "dtensor: cannot write the error file %s: %s\n", path->c_str(), std::strerror(errno));
    return false;
  }
  const bool ok = std::fwrite(body.data(), 1, body.size(), f) == body.size();
  return std::fclose(f) == 0 && ok;
}

std::optional<std::string> read_error_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  // The newer form nests the message: the first "message" key holds an object whose "message" is the text.
  const size_t outer = s.find("\"message\"");
  if (outer == std::string::npos) return std::nullopt;
  if (auto inner = json::find_string_value(s, "message", outer + 9)) return inner;
  return json::find_string_value(s, "message", outer);
}

}  // namespace dt
