#include "collectives/store/memory_store.h"

#include "core/error.h"

namespace dt {

void MemoryStore::do_set(const std::string& key, std::string_view value, StoreDuration) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = std::string(value);
  }
  cv_.notify_all();
}

void MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                              StoreDuration timeout) {
  auto all_present = [&] {
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  };
  if (cv_.wait_for(lock, timeout, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!data_.count(k)) missing.push_back(k);
  DT_THROW(TimeoutError, store_detail::wait_timeout_message("", keys, missing, timeout));
}

std::string MemoryStore::do_get(const std::string& key, StoreDuration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, {key}, timeout);
  return data_.at(key);
}

int64_t MemoryStore::do_add(const std::string& key, int64_t delta, StoreDuration) {
  int64_t out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    out = store_detail::add_to_value(key, it == data_.end() ? nullptr : &it->second, delta);
    data_[key] = std::to_string(out);
  }
  cv_.notify_all();
  return out;
}

CompareSetResult MemoryStore::do_compare_set(const std::string& key, std::optional<std::string_view> expected,
                                             std::string_view desired, StoreDuration) {
  CompareSetResult r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    bool match = expected ? (it != data_.end() && it->second == *expected) : it == data_.end();
    if (match) {
      data_[key] = std::string(desired);
      r.swapped = true;
      r.value = std::string(desired);
    } else if (it != data_.end()) {
      r.value = it->second;
    }
  }
  if (r.swapped) cv_.notify_all();
  return r;
}

void MemoryStore::do_wait(const std::vector<std::string>& keys, StoreDuration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock, keys, timeout);
}

bool MemoryStore::do_delete_key(const std::string& key, StoreDuration) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

bool MemoryStore::do_check(const std::vector<std::string>& keys, StoreDuration) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

}  // namespace dt
