#include "collectives/store/prefix_store.h"

#include "core/error.h"

namespace dt {

namespace {
StoreDuration base_timeout(const std::shared_ptr<Store>& base) {
  DT_CHECK_ARG(base != nullptr, "PrefixStore: the underlying store is null");
  return base->timeout();
}
}  // namespace

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : Store(base_timeout(base)), base_(std::move(base)), prefix_(std::move(prefix)) {
  DT_CHECK_ARG(!prefix_.empty() && prefix_.front() != '/' && prefix_.back() != '/',
               "PrefixStore: the prefix must be non-empty and not start or end with '/', got '", prefix_, "'");
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

// Blocking calls pass their resolved timeout on; the others run on the base store's own deadline.
void PrefixStore::do_set(const std::string& key, std::string_view value, StoreDuration) {
  base_->set(full(key), value);
}

std::string PrefixStore::do_get(const std::string& key, StoreDuration timeout) {
  return base_->get(full(key), timeout);
}

int64_t PrefixStore::do_add(const std::string& key, int64_t delta, StoreDuration) {
  return base_->add(full(key), delta);
}

CompareSetResult PrefixStore::do_compare_set(const std::string& key, std::optional<std::string_view> expected,
                                             std::string_view desired, StoreDuration) {
  return base_->compare_set(full(key), expected, desired);
}

void PrefixStore::do_wait(const std::vector<std::string>& keys, StoreDuration timeout) {
  base_->wait(full(keys), timeout);
}

bool PrefixStore::do_delete_key(const std::string& key, StoreDuration) { return base_->delete_key(full(key)); }

bool PrefixStore::do_check(const std::vector<std::string>& keys, StoreDuration) { return base_->check(full(keys)); }

}  // namespace dt
