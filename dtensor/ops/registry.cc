// The registry of op rules: every DTensor op's rule, registered family by family in one place (the order only
// matters for registered_ops()).
#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "dtensor/ops/dispatch.h"
#include "dtensor/ops/rule_util.h"

namespace dt::ops {

namespace {

struct Registry {
  std::vector<OpRule> rules;
  std::unordered_map<std::string, size_t> index;
};

const Registry& registry() {
  static const Registry* r = [] {
    auto* reg = new Registry();
    detail::register_elementwise_rules(reg->rules);
    detail::register_matmul_rules(reg->rules);
    detail::register_reduction_rules(reg->rules);
    detail::register_softmax_rules(reg->rules);
    detail::register_norm_rules(reg->rules);
    detail::register_embedding_rules(reg->rules);
    detail::register_loss_rules(reg->rules);
    detail::register_view_rules(reg->rules);
    detail::register_dropout_rules(reg->rules);
    detail::register_index_rules(reg->rules);
    for (size_t i = 0; i < reg->rules.size(); ++i) {
      const OpRule& rule = reg->rules[i];
      DT_ASSERT(rule.meta && rule.strategies && rule.compute, "rule ", rule.name, " is incomplete");
      DT_ASSERT(reg->index.emplace(rule.name, i).second, "rule ", rule.name, " is registered twice");
    }
    return reg;
  }();
  return *r;
}

// Rules registered after start-up (register_op_rule): their ids continue after the built-in ones. The built-in
// table is immutable, so the common path takes no lock; user rules live in a deque (references to its elements stay
// valid as it grows) behind a reader-writer lock.
struct UserRules {
  std::shared_mutex mu;
  std::deque<OpRule> rules;
  std::unordered_map<std::string, size_t> index;
};
UserRules& user_rules() {
  static UserRules* u = new UserRules();  // never destroyed: ops may run during static destruction
  return *u;
}

}  // namespace

OpId register_op_rule(OpRule rule) {
  DT_CHECK_ARG(!rule.name.empty(), "dt::ops::register_op_rule: the rule has no name");
  DT_CHECK_ARG(rule.meta && rule.strategies && rule.compute, "dt::ops::register_op_rule: rule '", rule.name,
               "' needs meta, strategies and compute (given: meta ", bool(rule.meta), ", strategies ",
               bool(rule.strategies), ", compute ", bool(rule.compute), ")");
  const Registry& builtin = registry();
  DT_CHECK_ARG(!builtin.index.count(rule.name), "dt::ops::register_op_rule: '", rule.name,
               "' is a built-in op; choose another name");
  UserRules& u = user_rules();
  std::unique_lock lock(u.mu);
  DT_CHECK_ARG(!u.index.count(rule.name), "dt::ops::register_op_rule: an op named '", rule.name,
               "' is already registered");
  const size_t i = u.rules.size();
  u.index.emplace(rule.name, i);
  u.rules.push_back(std::move(rule));
  return static_cast<OpId>(builtin.rules.size() + i);
}

const OpRule& find_rule(const std::string& op) { return rule_of(op_id(op)); }

OpId op_id(const std::string& op) {
  const Registry& r = registry();
  auto it = r.index.find(op);
  if (it != r.index.end()) return static_cast<OpId>(it->second);
  UserRules& u = user_rules();
  std::shared_lock lock(u.mu);
  auto ut = u.index.find(op);
  if (ut == u.index.end()) DT_THROW(InternalError, "no DTensor op rule is registered for '", op, "'");
  return static_cast<OpId>(r.rules.size() + ut->second);
}

const OpRule& rule_of(OpId id) {
  const Registry& r = registry();
  const auto i = static_cast<size_t>(id);
  if (i < r.rules.size()) return r.rules[i];
  UserRules& u = user_rules();
  std::shared_lock lock(u.mu);
  DT_ASSERT(i - r.rules.size() < u.rules.size(), "op id ", static_cast<uint32_t>(id), " is not registered");
  return u.rules[i - r.rules.size()];
}

bool is_registered_op(const std::string& op) {
  if (registry().index.count(op)) return true;
  UserRules& u = user_rules();
  std::shared_lock lock(u.mu);
  return u.index.count(op) != 0;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> out;
  for (const OpRule& rule : registry().rules) out.push_back(rule.name);
  UserRules& u = user_rules();
  std::shared_lock lock(u.mu);
  for (const OpRule& rule : u.rules) out.push_back(rule.name);
  return out;
}

}  // namespace dt::ops
