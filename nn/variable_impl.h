// VariableImpl: the state behind a Variable handle. nn's own: included by nn's .cc files only (the layering check
// forbids it elsewhere); other floors use Variable's methods (deliver_grad, set_grad_sink, ...).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/variable.h"

namespace dt::nn {

struct VariableImpl {
  DTensor data;
  DTensor grad;
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  int output_nr = 0;              // which output of grad_fn
  int next_hook_id = 0;
  std::vector<std::pair<int, GradHook>> hooks;  // leaves only (a non-leaf's hooks live on its grad_fn)
  std::vector<std::pair<int, PostAccumulateGradHook>> post_accumulate_hooks;
  std::string name;  // set by modules for parameters (their fully-qualified name); used in messages
  // Variable::set_grad_sink's.
  GradSink grad_sink;
};

}  // namespace dt::nn
