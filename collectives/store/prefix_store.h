// A sub-group's own key space over any store: key "k" becomes "<prefix>/k" in the underlying store. Prefix stores
// nest ("a" over "b" gives "b/a/k"). The default timeout is the underlying store's at construction.
#pragma once

#include <memory>
#include <string>

#include "collectives/store/store.h"

namespace dt {

class PrefixStore final : public Store {
 public:
  // prefix: non-empty, without '/' at either end.
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

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
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace dt
