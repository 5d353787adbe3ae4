// In-process store (the thread backend's rendezvous): a map under one mutex, waiters on a condition variable.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>

#include "collectives/store/store.h"

namespace dt {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::optional<StoreDuration> timeout = std::nullopt) : Store(timeout) {}

 protected:
  void do_set(const std::string& key, std::string_view value, StoreDuration timeout) override;
  std::string do_get(const std::string& key, StoreDuration timeout) override;
  int64_t do_add(const std::string& key, int64_t delta, StoreDuration timeout) override;
  CompareSetResult do_compare_set(const std::string& key, std::optional<std::string_view> expected,
                                  std::string_view desired, StoreDuration timeout) override;
  void do_wait(const std::vector<std::string>& keys, StoreDuration timeout) override;
  bool do_delete_key(const std::string& key, StoreDuration timeout) override;
  bool do_check(const std::vector<std::string>& keys, StoreDuration timeout) override;

 private:
  // Waits (lock held) until all keys exist; throws TimeoutError after `timeout`.
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, StoreDuration timeout);

  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::string> data_;
};

}  // namespace dt
