// Key-value store for rendezvous: the abstract interface shared by the in-process MemoryStore (thread backend), the
// TCP client (TcpStore) and PrefixStore (a sub-group's own key space over any store).
//
// Values are byte strings: std::string holds any bytes (embedded NULs included); set_bytes/get_bytes take
// std::vector<uint8_t>. Integers written by add() are stored as decimal text, so get() of a counter reads "5".
//
// Every call that can block has a deadline: the store's default timeout (DT_TIMEOUT_S in seconds, else 300 s; see
// default_store_timeout()) unless the call passes its own. An expired deadline throws dt::TimeoutError naming the
// keys and the timeout. Stores are thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dt {

using StoreDuration = std::chrono::milliseconds;

// DT_TIMEOUT_S (seconds, fractions allowed, > 0) or 300 s when unset. Throws dt::InvalidArgument naming the variable
// when it is malformed.
StoreDuration default_store_timeout();

// "2.5 s": how timeouts are shown in messages.
std::string format_duration(StoreDuration d);

// What compare_set() did.
struct CompareSetResult {
  bool swapped = false;              // `desired` was stored
  std::optional<std::string> value;  // the value held after the call; nullopt when the key is absent
};

class Store {
 public:
  // timeout: the default deadline of blocking calls; nullopt = default_store_timeout().
  explicit Store(std::optional<StoreDuration> timeout = std::nullopt);
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores `value` under `key`, replacing any previous value, and wakes the callers waiting for `key`.
  void set(const std::string& key, std::string_view value);
  void set_bytes(const std::string& key, const std::vector<uint8_t>& value);

  // Waits until `key` exists (up to the deadline), then returns its value.
  std::string get(const std::string& key);
  std::string get(const std::string& key, StoreDuration timeout);
  std::vector<uint8_t> get_bytes(const std::string& key);
  std::vector<uint8_t> get_bytes(const std::string& key, StoreDuration timeout);

  // Atomically adds `delta` to the decimal integer stored under `key` (an absent key counts as 0) and returns the
  // new value. Throws dt::InvalidArgument when the key holds something else or the sum overflows int64.
  int64_t add(const std::string& key, int64_t delta);

  // Atomically stores `desired` when the key's value equals `*expected`, or, with expected == nullopt, when the key
  // is absent (create-if-absent). Returns whether it swapped and the value held afterwards.
  CompareSetResult compare_set(const std::string& key, std::optional<std::string_view> expected,
                               std::string_view desired);

  // Waits until every key exists. Throws dt::TimeoutError naming the missing keys when the deadline passes.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, StoreDuration timeout);

  // Removes `key`; returns whether it existed.
  bool delete_key(const std::string& key);

  // Whether every key exists (does not wait).
  bool check(const std::vector<std::string>& keys);

  StoreDuration timeout() const { return timeout_; }
  void set_timeout(StoreDuration timeout);

 protected:
  // Implementations: arguments are validated and `timeout` resolved (>= 0) by the public funnel above. Non-waiting
  // calls still get a deadline (the default timeout) for their network round trip.
  virtual void do_set(const std::string& key, std::string_view value, StoreDuration timeout) = 0;
  virtual std::string do_get(const std::string& key, StoreDuration timeout) = 0;
  virtual int64_t do_add(const std::string& key, int64_t delta, StoreDuration timeout) = 0;
  virtual CompareSetResult do_compare_set(const std::string& key, std::optional<std::string_view> expected,
                                          std::string_view desired, StoreDuration timeout) = 0;
  virtual void do_wait(const std::vector<std::string>& keys, StoreDuration timeout) = 0;
  virtual bool do_delete_key(const std::string& key, StoreDuration timeout) = 0;
  virtual bool do_check(const std::vector<std::string>& keys, StoreDuration timeout) = 0;

 private:
  StoreDuration timeout_;
};

// Shared by the store implementations (the TCP server applies the same rules as MemoryStore).
namespace store_detail {
// The value after adding `delta` to `current` (nullptr: absent key). Throws dt::InvalidArgument naming `key`.
int64_t add_to_value(const std::string& key, const std::string* current, int64_t delta);
// "[a, b]" for messages.
std::string key_list(const std::vector<std::string>& keys);
// The TimeoutError message of a wait/get.
std::string wait_timeout_message(const std::string& where, const std::vector<std::string>& keys,
                                 const std::vector<std::string>& missing, StoreDuration timeout);
}  // namespace store_detail

}  // namespace dt
