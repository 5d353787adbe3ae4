// Modules as CommDebugMode scopes (dtensor/comm_debug.h): every module of a tree enters its fully-qualified name
// while its forward runs and while its backward runs, so the collectives are counted per module, forward and
// backward apart, as PyTorch's CommDebugMode tracks nn.Module hierarchies.
//
//   dt::CommDebugMode mode;
//   {
//     auto tracked = dt::nn::track_modules(mode, *model);  // hooks on every module until `tracked` goes
//     auto loss = ...(*model)(x)...; loss.backward();
//   }
//   std::cout << mode.to_text();
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "dtensor/comm_debug.h"
#include "nn/module.h"

namespace dt::nn {

// Removes its hooks when destroyed (the mode keeps the counts).
class ModuleTracking {
 public:
  ModuleTracking() = default;
  ~ModuleTracking();
  ModuleTracking(ModuleTracking&&) noexcept = default;
  ModuleTracking& operator=(ModuleTracking&&) noexcept = default;

 private:
  friend ModuleTracking track_modules(CommDebugMode& mode, Module& root);
  std::vector<std::pair<std::shared_ptr<Module>, int>> hooks_;
};

// The root is named by its type ("Gpt"), its descendants by their fully-qualified names ("layers.0.attention"),
// declared in named_modules order with their depth.
[[nodiscard]] ModuleTracking track_modules(CommDebugMode& mode, Module& root);

}  // namespace dt::nn
