#include "collectives/store/store.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "core/config.h"
#include "core/error.h"

namespace dt {

StoreDuration default_store_timeout() {
  const double s = config::get_seconds(config::Var::kTimeoutS);
  return StoreDuration(std::max<int64_t>(1, static_cast<int64_t>(std::llround(s * 1000.0))));
}

std::string format_duration(StoreDuration d) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

Store::Store(std::optional<StoreDuration> timeout) : timeout_(timeout ? *timeout : default_store_timeout()) {
  DT_CHECK_ARG(timeout_.count() >= 0, "store timeout must be >= 0, got ", timeout_.count(), " ms");
}

Store::~Store() = default;

void Store::set_timeout(StoreDuration timeout) {
  DT_CHECK_ARG(timeout.count() >= 0, "store timeout must be >= 0, got ", timeout.count(), " ms");
  timeout_ = timeout;
}

namespace {

void check_key(const std::string& key, const char* what) {
  DT_CHECK_ARG(!key.empty(), "store ", what, ": the key must be non-empty");
}

void check_keys(const std::vector<std::string>& keys, const char* what) {
  for (const auto& k : keys) check_key(k, what);
}

void check_timeout(StoreDuration timeout, const char* what) {
  DT_CHECK_ARG(timeout.count() >= 0, "store ", what, ": timeout must be >= 0, got ", timeout.count(), " ms");
}

}  // namespace

void Store::set(const std::string& key, std::string_view value) {
  check_key(key, "set");
  do_set(key, value, timeout_);
}

void Store::set_bytes(const std::string& key, const std::vector<uint8_t>& value) {
  set(key, std::string_view(reinterpret_cast<const char*>(value.data()), value.size()));
}

std::string Store::get(const std::string& key) { return get(key, timeout_); }

std::string Store::get(const std::string& key, StoreDuration timeout) {
  check_key(key, "get");
  check_timeout(timeout, "get");
  return do_get(key, timeout);
}

std::vector<uint8_t> Store::get_bytes(const std::string& key) { return get_bytes(key, timeout_); }

std::vector<uint8_t> Store::get_bytes(const std::string& key, StoreDuration timeout) {
  std::string v = get(key, timeout);
  return std::vector<uint8_t>(v.begin(), v.end());
}

int64_t Store::add(const std::string& key, int64_t delta) {
  check_key(key, "add");
  return do_add(key, delta, timeout_);
}

CompareSetResult Store::compare_set(const std::string& key, std::optional<std::string_view> expected,
                                    std::string_view desired) {
  check_key(key, "compare_set");
  return do_compare_set(key, expected, desired, timeout_);
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void Store::wait(const std::vector<std::string>& keys, StoreDuration timeout) {
  check_keys(keys, "wait");
  check_timeout(timeout, "wait");
  if (keys.empty()) return;
  do_wait(keys, timeout);
}

bool Store::delete_key(const std::string& key) {
  check_key(key, "delete_key");
  return do_delete_key(key, timeout_);
}

bool Store::check(const std::vector<std::string>& keys) {
  check_keys(keys, "check");
  if (keys.empty()) return true;
  return do_check(keys, timeout_);
}

namespace store_detail {

int64_t add_to_value(const std::string& key, const std::string* current, int64_t delta) {
  int64_t base = 0;
  if (current != nullptr) {
    const std::string& s = *current;
    size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
    bool ok = i < s.size() && s.size() <= 20;
    for (size_t j = i; ok && j < s.size(); ++j) ok = s[j] >= '0' && s[j] <= '9';
    if (ok) {
      errno = 0;
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      ok = errno == 0 && end == s.c_str() + s.size();
      base = v;
    }
    DT_CHECK_ARG(ok, "store add('", key, "'): the key holds a value that is not a decimal int64 (", s.size(),
                 " bytes); add() needs a key it created or one set to a decimal integer");
  }
  int64_t out = 0;
  DT_CHECK_ARG(!__builtin_add_overflow(base, delta, &out), "store add('", key, "', ", delta, "): ", base, " + ", delta,
               " overflows int64");
  return out;
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    if (i == 16) {
      out += str_cat("... (", keys.size(), " keys)");
      break;
    }
    out += keys[i];
  }
  return out + "]";
}

std::string wait_timeout_message(const std::string& where, const std::vector<std::string>& keys,
                                 const std::vector<std::string>& missing, StoreDuration timeout) {
  return str_cat("store wait", where.empty() ? "" : " on ", where, " timed out after ", format_duration(timeout),
                 ": keys ", key_list(keys), " not all set (missing: ", key_list(missing),
                 "); raise DT_TIMEOUT_S if the peers are just slow");
}

}  // namespace store_detail

}  // namespace dt
