// A Gpt cut into pipeline stages (pipeline/gpt_stage.h).
#include "pipeline/gpt_stage.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace dt::pipeline {
namespace {

// A module that only holds children under the whole model's names ("layers.5" on a stage holding blocks 5 and 6):
// the blocks' container, and a rank's stages for their state (gpt_rank_module).
class Holder : public nn::Module {
 public:
  explicit Holder(const char* type) : Module(type) {}
  std::vector<nn::Variable> forward(const std::vector<nn::Variable>&) override {
    DT_THROW(Unsupported, type_name(), " only holds a Gpt's parts under their names: the stages run them");
  }
};

// Registers into `into`, under the model's names, what `stages` (of `num_stages`) hold: the embedding with stage 0,
// their blocks in order (layers.<i>), the final norm and the output projection with the last stage. Returns the
// blocks.
std::vector<std::shared_ptr<nn::TransformerBlock>> hold_parts(nn::Module& into, const nn::Gpt& model,
                                                              const std::set<int>& stages, int num_stages) {
  for (int s : stages) DT_CHECK_ARG(s >= 0 && s < num_stages, "gpt_stage: stage ", s, " of ", num_stages);
  if (stages.count(0)) into.register_module("tok_embeddings", model.tok_embeddings);
  auto holder = std::make_shared<Holder>("GptBlocks");
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks;
  for (int s : stages) {
    const IndexRange r = stage_layers(int64_t(model.layers.size()), num_stages, s);
    for (int64_t i = r.begin; i < r.end; ++i) {
      holder->register_module(std::to_string(i), model.layers[size_t(i)]);
      blocks.push_back(model.layers[size_t(i)]);
    }
  }
  if (!blocks.empty()) into.register_module("layers", holder);
  if (stages.count(num_stages - 1)) {
    into.register_module("norm", model.norm);
    if (model.output) into.register_module("output", model.output);
  }
  return blocks;
}

class GptStage : public nn::Module {
 public:
  GptStage(const std::shared_ptr<nn::Gpt>& model, int stage, int num_stages)
      : Module("GptStage"), model_(model), first_(stage == 0), last_(stage == num_stages - 1) {
    blocks_ = hold_parts(*this, *model, {stage}, num_stages);
  }

  std::vector<nn::Variable> forward(const std::vector<nn::Variable>& in) override {
    DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "GptStage: expects one input");
    nn::Variable h = first_ ? (*model_->tok_embeddings)(in[0]) : in[0];
    for (auto& block : blocks_) h = (*block)(h);
    if (last_) h = (*model_->output)((*model_->norm)(h));
    return {h};
  }

 private:
  std::shared_ptr<nn::Gpt> model_;
  bool first_, last_;
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks_;
};

}  // namespace

IndexRange stage_layers(int64_t num_layers, int num_stages, int stage) {
  DT_CHECK_ARG(num_stages >= 1 && stage >= 0 && stage < num_stages && num_layers >= 0, "stage_layers: stage ", stage,
               " of ", num_stages, " over ", num_layers, " layers");
  return balanced_range(num_layers, num_stages, stage);
}

nn::ModulePtr gpt_stage(const std::shared_ptr<nn::Gpt>& model, int stage, int num_stages) {
  DT_CHECK_ARG(model != nullptr, "gpt_stage: the model is null");
  DT_CHECK_ARG(num_stages >= 1 && stage >= 0 && stage < num_stages, "gpt_stage: stage ", stage, " of ", num_stages);
  DT_CHECK_ARG(num_stages == 1 || model->output != nullptr, "gpt_stage: a Gpt with tied embeddings cannot be split ",
               "into ", num_stages, " stages (the output projection is the first stage's embedding): untie them");
  DT_CHECK_ARG(model->logits_to_keep == 0, "gpt_stage: logits_to_keep is for generation, not pipeline training");
  return std::make_shared<GptStage>(model, stage, num_stages);
}

nn::ModulePtr gpt_rank_module(const std::shared_ptr<nn::Gpt>& model, const std::vector<int>& stages, int num_stages) {
  DT_CHECK_ARG(model != nullptr && !stages.empty(), "gpt_rank_module: a model and at least one stage are needed");
  auto parts = std::make_shared<Holder>("GptRankParts");
  hold_parts(*parts, *model, std::set<int>(stages.begin(), stages.end()), num_stages);
  return parts;
}

}  // namespace dt::pipeline
