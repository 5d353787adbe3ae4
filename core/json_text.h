// JSON string literals, the one place that writes and reads them: the recorder's trace files (core/trace.cc) and the
// error files of failed ranks (core/error_file.h). Not a JSON library: values are written by their callers.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dt::json {

// Appends `s` escaped for the inside of a JSON string literal (quotes not included).
void escape_into(std::string& out, std::string_view s);

// The string literal that starts at text[pos] (a '"'), unescaped (\uXXXX to UTF-8); `pos` moves past it. nullopt
// when text[pos] is not the start of a well-formed literal.
std::optional<std::string> read_string(std::string_view text, size_t& pos);

// The string value of the first `"key": "..."` at or after `pos` ("key" at any depth); nullopt when there is none.
std::optional<std::string> find_string_value(std::string_view text, std::string_view key, size_t pos = 0);

}  // namespace dt::json
