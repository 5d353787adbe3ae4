#include "nn/comm_debug.h"

#include <algorithm>
#include <string>

namespace dt::nn {

ModuleTracking::~ModuleTracking() {
  for (auto& [module, id] : hooks_) module->remove_hook(id);
}

ModuleTracking track_modules(CommDebugMode& mode, Module& root) {
  ModuleTracking t;
  using Phase = CommDebugMode::Phase;
  for (auto& [fqn, module] : root.named_modules()) {
    const std::string name = fqn.empty() ? root.type_name() : fqn;
    const int depth = fqn.empty() ? 1 : 2 + int(std::count(fqn.begin(), fqn.end(), '.'));
    mode.declare(name, depth);
    t.hooks_.emplace_back(module,
                          module->register_forward_pre_hook([&mode, name](Module&, const std::vector<Variable>&) {
                            mode.enter(name, Phase::kForward);
                            return std::optional<std::vector<Variable>>();
                          }));
    t.hooks_.emplace_back(module, module->register_forward_hook([&mode, name](Module&, const std::vector<Variable>&,
                                                                              const std::vector<Variable>&) {
      mode.exit(name, Phase::kForward);
      return std::optional<std::vector<Variable>>();
    }));
    t.hooks_.emplace_back(
        module, module->register_backward_pre_hook([&mode, name](Module&) { mode.enter(name, Phase::kBackward); }));
    t.hooks_.emplace_back(
        module, module->register_backward_hook([&mode, name](Module&) { mode.exit(name, Phase::kBackward); }));
  }
  return t;
}

}  // namespace dt::nn
