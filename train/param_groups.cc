// Optimizer parameter groups (train/param_groups.h).
#include "train/param_groups.h"

#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "nn/parallel.h"

namespace dt::train {

std::vector<nn::ParamGroup> param_groups(nn::Module& model, const ParamGroupOptions& o) {
  DT_CHECK_ARG(o.weight_decay >= 0, "param_groups: weight_decay must be >= 0, got ", o.weight_decay);
  // Which parameters are exempt from decay, by the module that owns them.
  std::set<const void*> exempt;
  for (const auto& [prefix, module] : model.named_modules()) {
    const std::string& type = module->type_name();
    const bool norm = type == "RMSNorm" || type == "LayerNorm";
    for (const auto& [name, p] : module->named_parameters(/*recurse=*/false)) {
      const bool no_decay = (norm && !o.decay_norms) || (name == "bias" && !o.decay_biases) ||
                            (type == "Embedding" && !o.decay_embeddings);
      if (no_decay) exempt.insert(p.impl());
    }
  }
  std::vector<bool> used(o.lr_scales.size(), false);
  std::map<std::pair<bool, double>, size_t> index;
  std::vector<nn::ParamGroup> groups;
  for (const auto& [fqn, p] : model.named_parameters()) {
    double scale = 1.0;
    for (size_t i = 0; i < o.lr_scales.size(); ++i)
      if (nn::fqn_matches(o.lr_scales[i].first, fqn)) {
        scale = o.lr_scales[i].second;
        used[i] = true;
        break;
      }
    const bool decay = !exempt.count(p.impl());
    auto [it, fresh] = index.try_emplace({decay, scale}, groups.size());
    if (fresh) {
      std::ostringstream name;
      name << (decay ? "decay" : "no_decay");
      if (scale != 1.0) name << " lr x" << scale;
      groups.push_back({name.str(), {}, scale, decay ? o.weight_decay : 0.0});
    }
    groups[it->second].params.push_back(p);
  }
  for (size_t i = 0; i < used.size(); ++i)
    DT_CHECK_ARG(used[i], "param_groups: the lr scale pattern '", o.lr_scales[i].first,
                 "' matches no parameter of the model");
  return groups;
}

}  // namespace dt::train
