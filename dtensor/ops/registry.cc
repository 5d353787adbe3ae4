// The registry of op rules: every DTensor op's rule, registered family by family in one place (the order only
// matters for registered_ops()).
#include <algorithm>
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
    detail::register_backward_rules(reg->rules);
    detail::register_dropout_rules(reg->rules);
    for (size_t i = 0; i < reg->rules.size(); ++i) {
      const OpRule& rule = reg->rules[i];
      DT_ASSERT(rule.meta && rule.strategies && rule.compute, "rule ", rule.name, " is incomplete");
      DT_ASSERT(reg->index.emplace(rule.name, i).second, "rule ", rule.name, " is registered twice");
    }
    return reg;
  }();
  return *r;
}

}  // namespace

const OpRule& find_rule(const std::string& op) { return rule_of(op_id(op)); }

OpId op_id(const std::string& op) {
  const Registry& r = registry();
  auto it = r.index.find(op);
  if (it == r.index.end()) DT_THROW(InternalError, "no DTensor op rule is registered for '", op, "'");
  return static_cast<OpId>(it->second);
}

const OpRule& rule_of(OpId id) {
  const Registry& r = registry();
  DT_ASSERT(static_cast<size_t>(id) < r.rules.size(), "op id ", static_cast<uint32_t>(id), " is not registered");
  return r.rules[static_cast<size_t>(id)];
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> out;
  for (const OpRule& rule : registry().rules) out.push_back(rule.name);
  return out;
}

}  // namespace dt::ops
