#include "core/json_text.h"

#include <cstdio>

namespace dt::json {

void escape_into(std::string& out, std::string_view s) {
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
}

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Four hex digits at text[pos]; -1 when they are not.
int32_t read_hex4(std::string_view text, size_t pos) {
  if (pos + 4 > text.size()) return -1;
  int32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    const int h = hex_value(text[pos + i]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

}  // namespace

std::optional<std::string> read_string(std::string_view text, size_t& pos) {
  if (pos >= text.size() || text[pos] != '"') return std::nullopt;
  std::string out;
  for (size_t i = pos + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      pos = i + 1;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= text.size()) return std::nullopt;
    switch (text[i]) {
      case '"':
      case '\\':
      case '/':
        out += text[i];
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        int32_t cp = read_hex4(text, i + 1);
        if (cp < 0) return std::nullopt;
        i += 4;
        // A surrogate pair (json.dumps writes characters outside the BMP so).
        if (cp >= 0xD800 && cp < 0xDC00 && i + 6 < text.size() && text[i + 1] == '\\' && text[i + 2] == 'u') {
          const int32_t low = read_hex4(text, i + 3);
          if (low >= 0xDC00 && low < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            i += 6;
          }
        }
        append_utf8(out, uint32_t(cp));
        break;
      }
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

std::optional<std::string> find_string_value(std::string_view text, std::string_view key, size_t pos) {
  while (pos < text.size()) {
    const size_t q = text.find('"', pos);
    if (q == std::string_view::npos) return std::nullopt;
    size_t after = q;
    const std::optional<std::string> s = read_string(text, after);
    if (!s) return std::nullopt;
    size_t colon = after;
    while (colon < text.size() && (text[colon] == ' ' || text[colon] == '\n' || text[colon] == '\t')) ++colon;
    if (*s == key && colon < text.size() && text[colon] == ':') {
      size_t v = colon + 1;
      while (v < text.size() && (text[v] == ' ' || text[v] == '\n' || text[v] == '\t')) ++v;
      if (v < text.size() && text[v] == '"') return read_string(text, v);
    }
    pos = after;
  }
  return std::nullopt;
}

}  // namespace dt::json
