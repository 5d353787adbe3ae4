#include "nn/checkpoint.h"

#include <algorithm>

#include "core/error.h"

namespace dt::nn {
namespace {

constexpr const char* kModel = "model.";
constexpr const char* kOptimState = "optim.state.";

// An empty tensor laid out like t (values to be loaded, then copied into a parameter).
DTensor empty_like(const DTensor& t) {
  return DTensor::from_local_unchecked(Tensor::empty(t.to_local().shape(), t.dtype(), t.to_local().device()), t.mesh(),
                                       t.spec(), t.shape());
}

// The fully-qualified name of every optimizer parameter, from the model (InvalidArgument for one it lacks).
std::vector<std::string> optimizer_names(const Module& model, const Optimizer& optimizer) {
  const auto named = model.named_parameters();
  std::vector<std::string> names;
  for (const Variable& p : optimizer.params()) {
    auto it = std::find_if(named.begin(), named.end(), [&](const auto& n) { return n.second.impl() == p.impl(); });
    DT_CHECK_ARG(it != named.end(), "checkpoint: optimizer parameter ",
                 p.name().empty() ? std::string("(unnamed)") : p.name(), " is not a parameter of the model");
    names.push_back(it->first);
  }
  return names;
}

}  // namespace

TrainingState training_state(const Module& model, Optimizer* optimizer) {
  TrainingState s;
  for (auto& [name, t] : model.state_dict()) s.tensors.push_back({kModel + name, t});
  if (optimizer == nullptr) return s;
  const std::vector<std::string> names = optimizer_names(model, *optimizer);
  for (size_t i = 0; i < names.size(); ++i) {
    const Variable& p = optimizer->params()[i];
    for (auto& [state_name, t] : optimizer->ensure_state(p))
      s.tensors.push_back({kOptimState + names[i] + "." + state_name, t});
    s.metadata[kOptimState + names[i] + ".step"] = optimizer->state_step(p);
  }
  s.metadata["optim.steps"] = optimizer->steps();
  s.metadata["optim.lr"] = optimizer->lr();
  return s;
}

namespace {

TrainingState state_with(const Module& model, Optimizer* optimizer, const checkpoint::Metadata& metadata) {
  TrainingState s = training_state(model, optimizer);
  for (const auto& [k, v] : metadata) {
    DT_CHECK_ARG(k.rfind("optim.", 0) != 0, "checkpoint: metadata key '", k, "' is reserved (optim.*)");
    s.metadata[k] = v;
  }
  return s;
}

}  // namespace

void save_checkpoint(const std::string& dir, const Module& model, Optimizer* optimizer,
                     const checkpoint::Metadata& metadata, const checkpoint::SaveOptions& options) {
  const TrainingState s = state_with(model, optimizer, metadata);
  checkpoint::save(dir, s.tensors, s.metadata, options);
}

checkpoint::SaveHandle save_checkpoint_async(const std::string& dir, const Module& model, Optimizer* optimizer,
                                             const checkpoint::Metadata& metadata,
                                             const checkpoint::SaveOptions& options) {
  const TrainingState s = state_with(model, optimizer, metadata);
  return checkpoint::save_async(dir, s.tensors, s.metadata, options);
}

checkpoint::LoadResult load_checkpoint(const std::string& dir, Module& model, Optimizer* optimizer,
                                       const checkpoint::LoadOptions& options) {
  const TrainingState live = training_state(model, optimizer);
  // Model values land in temporaries first: a parameter's payload may be FSDP's gathered copy, which a reshard
  // would drop; load_state_dict copies into the shards and keeps every parameter's identity.
  checkpoint::TensorList targets;
  StateDict model_values;
  for (const auto& [name, t] : live.tensors) {
    if (name.rfind(kModel, 0) == 0) {
      model_values.push_back({name.substr(std::string(kModel).size()), empty_like(t)});
      targets.push_back({name, model_values.back().second});
    } else {
      targets.push_back({name, t});  // optimizer state: its only copy, loaded in place
    }
  }
  checkpoint::LoadResult r = checkpoint::load(dir, targets, options);
  StateDict loaded;
  for (const auto& [name, t] : model_values)
    if (std::find(r.missing.begin(), r.missing.end(), kModel + name) == r.missing.end()) loaded.push_back({name, t});
  model.load_state_dict(loaded, /*strict=*/false);
  if (optimizer != nullptr) {
    const std::vector<std::string> names = optimizer_names(model, *optimizer);
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = r.metadata.find(kOptimState + names[i] + ".step");
      if (it == r.metadata.end()) continue;
      const int64_t* step = std::get_if<int64_t>(&it->second);
      DT_CHECK_ARG(step != nullptr, "checkpoint '", dir, "': metadata ", it->first, " is not an integer");
      optimizer->set_state_step(optimizer->params()[i], *step);
    }
    if (auto it = r.metadata.find("optim.steps"); it != r.metadata.end())
      if (const int64_t* n = std::get_if<int64_t>(&it->second)) optimizer->set_steps(*n);
    if (auto it = r.metadata.find("optim.lr"); it != r.metadata.end())
      if (const double* lr = std::get_if<double>(&it->second)) optimizer->set_lr(*lr);
  }
  return r;
}

SafetensorsValues read_safetensors(const std::string& path, const Module& model, const checkpoint::LoadOptions& options,
                                   const std::function<std::string(const std::string&)>& file_name) {
  checkpoint::TensorList targets;
  SafetensorsValues out;
  for (const auto& [name, t] : model.state_dict()) {
    out.values.push_back({name, empty_like(t)});
    targets.push_back({file_name ? file_name(name) : name, out.values.back().second});
  }
  out.result = checkpoint::import_safetensors(path, targets, options);
  std::vector<std::string> missing;  // in the model's names
  for (size_t i = 0; i < targets.size(); ++i)
    if (std::find(out.result.missing.begin(), out.result.missing.end(), targets[i].first) != out.result.missing.end())
      missing.push_back(out.values[i].first);
  std::erase_if(out.values,
                [&](const auto& v) { return std::find(missing.begin(), missing.end(), v.first) != missing.end(); });
  return out;
}

checkpoint::LoadResult load_safetensors(const std::string& path, Module& model,
                                        const checkpoint::LoadOptions& options) {
  SafetensorsValues r = read_safetensors(path, model, options);
  model.load_state_dict(r.values, /*strict=*/false);
  return r.result;
}

}  // namespace dt::nn
