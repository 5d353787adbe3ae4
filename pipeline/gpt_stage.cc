// A Gpt cut into pipeline stages (pipeline/gpt_stage.h).
#include "pipeline/gpt_stage.h"

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace dt::pipeline {
namespace {

// A container whose children keep the whole model's indices ("layers.5" on a stage holding blocks 5 and 6).
class StageBlocks : public nn::Module {
 public:
  StageBlocks() : Module("StageBlocks") {}
  std::vector<nn::Variable> forward(const std::vector<nn::Variable>&) override {
    DT_THROW(Unsupported, "StageBlocks is a container: its stage runs the blocks");
  }
};

class GptStage : public nn::Module {
 public:
  GptStage(const std::shared_ptr<nn::Gpt>& model, int stage, int num_stages)
      : Module("GptStage"), first_(stage == 0), last_(stage == num_stages - 1) {
    const IndexRange r = stage_layers(int64_t(model->layers.size()), num_stages, stage);
    if (first_) embed_ = register_module("tok_embeddings", model->tok_embeddings);
    auto blocks = std::make_shared<StageBlocks>();
    for (int64_t i = r.begin; i < r.end; ++i) {
      blocks->register_module(std::to_string(i), model->layers[size_t(i)]);
      blocks_.push_back(model->layers[size_t(i)]);
    }
    if (!blocks_.empty()) register_module("layers", blocks);
    if (last_) {
      norm_ = register_module("norm", model->norm);
      output_ = register_module("output", model->output);
    }
  }

  std::vector<nn::Variable> forward(const std::vector<nn::Variable>& in) override {
    DT_CHECK_ARG(in.size() == 1 && in[0].defined(), "GptStage: expects one input");
    nn::Variable h = first_ ? (*embed_)(in[0]) : in[0];
    for (auto& block : blocks_) h = (*block)(h);
    if (last_) h = (*output_)((*norm_)(h));
    return {h};
  }

 private:
  bool first_, last_;
  std::shared_ptr<nn::Embedding> embed_;
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks_;
  std::shared_ptr<nn::Module> norm_;
  std::shared_ptr<nn::Linear> output_;
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

}  // namespace dt::pipeline
