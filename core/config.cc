#include "core/config.h"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/logging.h"

namespace dt::config {
namespace {

constexpr VarInfo kVars[] = {
#define DT_CONFIG_ROW(id, name, type, def, lo, hi, choices, help) \
  {Var::id, name, Type::type, def, lo, hi, choices, help},
    DT_CONFIG_VARS(DT_CONFIG_ROW)
#undef DT_CONFIG_ROW
};
constexpr size_t kCount = sizeof(kVars) / sizeof(kVars[0]);

struct Value {
  std::atomic<bool> ready{false};
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string s;
};
Value g_values[kCount];
std::mutex g_mu;

const char* type_name(Type t) {
  switch (t) {
    case Type::kBool:
      return "0|1";
    case Type::kInt:
      return "integer";
    case Type::kSeconds:
      return "seconds";
    case Type::kChoice:
      return "word";
    case Type::kString:
      return "text";
  }
  return "?";
}

bool one_of(std::string_view word, std::string_view list) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == word) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// Parses `text` as `var` declares into `out`; a malformed value is an InvalidArgument naming the variable.
void parse(const VarInfo& var, const std::string& text, Value& out) {
  const std::string shown = "'" + text + "'";
  switch (var.type) {
    case Type::kBool:
      if (one_of(text, "1,true,yes,on")) {
        out.b = true;
      } else if (one_of(text, "0,false,no,off")) {
        out.b = false;
      } else {
        DT_THROW(InvalidArgument, var.name, " must be 0 or 1 (or true/false, yes/no, on/off), got ", shown);
      }
      return;
    case Type::kInt: {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(text.c_str(), &end, 10);
      DT_CHECK_ARG(end != text.c_str() && *end == '\0' && errno == 0 && v >= var.min && v <= var.max, var.name,
                   " must be an integer in ", var.min, "..", var.max, ", got ", shown);
      out.i = v;
      return;
    }
    case Type::kSeconds: {
      char* end = nullptr;
      errno = 0;
      const double v = std::strtod(text.c_str(), &end);
      DT_CHECK_ARG(end != text.c_str() && *end == '\0' && errno == 0 && std::isfinite(v) && v > 0 && v < 1e9, var.name,
                   " must be a positive number of seconds, got ", shown);
      out.d = v;
      return;
    }
    case Type::kChoice:
      DT_CHECK_ARG(one_of(text, var.choices), var.name, " must be one of ", var.choices, ", got ", shown);
      out.s = text;
      return;
    case Type::kString:
      out.s = text;
      return;
  }
}

const Value& value(Var v, Type type) {
  const size_t idx = size_t(v);
  DT_ASSERT(idx < kCount && kVars[idx].type == type);
  Value& val = g_values[idx];
  if (val.ready.load(std::memory_order_acquire)) return val;
  std::lock_guard<std::mutex> lock(g_mu);
  if (val.ready.load(std::memory_order_relaxed)) return val;
  const VarInfo& var = kVars[idx];
  std::optional<std::string> set = lookup(var.name);
  if (!set || set->empty()) {
    DT_CHECK_ARG(*var.default_value != '\0' || type == Type::kString || type == Type::kChoice, var.name,
                 " is not set (", var.help, ")");
    if (*var.default_value != '\0') parse(var, var.default_value, val);
  } else {
    parse(var, *set, val);
  }
  val.ready.store(true, std::memory_order_release);
  return val;
}

}  // namespace

std::span<const VarInfo> all_vars() { return {kVars, kCount}; }

const VarInfo& info(Var v) {
  DT_ASSERT(size_t(v) < kCount);
  return kVars[size_t(v)];
}

bool get_bool(Var v) { return value(v, Type::kBool).b; }
int64_t get_int(Var v) { return value(v, Type::kInt).i; }
double get_seconds(Var v) { return value(v, Type::kSeconds).d; }

std::string get_string(Var v) {
  const Type t = info(v).type;
  return value(v, t == Type::kChoice ? Type::kChoice : Type::kString).s;
}

int64_t default_int(Var v) {
  const VarInfo& var = info(v);
  DT_ASSERT(var.type == Type::kInt && *var.default_value != '\0');
  Value parsed;
  parse(var, var.default_value, parsed);
  return parsed.i;
}

bool is_set(Var v) {
  auto set = lookup(info(v).name);
  return set && !set->empty();
}

std::optional<std::string> lookup(const std::string& name) {
  const char* e = std::getenv(name.c_str());  // the one read of the process environment
  if (e == nullptr) return std::nullopt;
  return std::string(e);
}

std::string help_text() {
  std::ostringstream os;
  os << "Environment variables (dtensor reads each once, at its first use; a malformed value is an error):\n";
  for (const VarInfo& var : kVars) {
    os << "  " << var.name << " (" << (var.type == Type::kChoice ? var.choices : type_name(var.type));
    if (*var.default_value) os << ", default " << var.default_value;
    os << ")\n      " << var.help << "\n";
  }
  return os.str();
}

void log_settings() {
  if (!log_enabled(LogLevel::kInfo)) return;
  for (const VarInfo& var : kVars) {
    auto set = lookup(var.name);
    if (!set || set->empty()) continue;
    const bool secret = var.id == Var::kStoreSecret;
    DT_LOG_INFO("config: ", var.name, "=", secret ? std::string("(set, not shown)") : *set,
                *var.default_value ? std::string(" (default ") + var.default_value + ")" : std::string());
  }
}

void reset_for_testing() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Value& v : g_values) v.ready.store(false, std::memory_order_release);
}

}  // namespace dt::config
