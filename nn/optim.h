// Optimizers on local shards, gradient clipping across shards and meshes, and the data-parallel gradient all-reduce
// (learning-rate schedules: train/lr_schedule.h).
//
//   nn::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.1});
//   loss.backward();
//   nn::clip_grad_norm_(model->parameters(), 1.0);
//   opt.step();
//   opt.zero_grad();
//
// State (momentum, moments) is keyed by the parameter, sized from its local shard, made on the first step, and is
// a DTensor with the parameter's placements. A parameter whose placements or mesh changed after its state was made
// is refused (build the optimizer after sharding the model).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nn/variable.h"

namespace dt::nn {

// A group of parameters with its own settings (PyTorch's param_groups): the lr is the optimizer's lr (which
// schedules set) times lr_scale; weight_decay, when set, replaces the optimizer's.
struct ParamGroup {
  std::string name;
  std::vector<Variable> params;
  double lr_scale = 1.0;
  std::optional<double> weight_decay;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<Variable> params);
  explicit Optimizer(const std::vector<ParamGroup>& groups);
  virtual ~Optimizer() = default;
  // Updates every parameter that has a gradient (others are skipped, as PyTorch).
  virtual void step() = 0;
  void zero_grad();  // set to none
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Variable>& params() const { return params_; }
  // The state tensors of a parameter ("exp_avg", "exp_avg_sq", "momentum_buffer"), empty before its first step.
  std::map<std::string, DTensor> state(const Variable& param) const;
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }

  // ---- state for checkpoints (nn/checkpoint.h) ----
  // The names of the state tensors each parameter gets (AdamW: exp_avg, exp_avg_sq; SGD with momentum:
  // momentum_buffer; plain SGD: none).
  virtual std::vector<std::string> state_names() const = 0;
  // A parameter's state tensors, made (zeros of its layout, step 0: what its first step would make) when it has
  // none, so that a checkpoint can be loaded into them in place. The parameter must be one of this optimizer's.
  std::map<std::string, DTensor> ensure_state(const Variable& param);
  // The number of steps a parameter's state has taken (0 without state), and setting it (after a load).
  int64_t state_step(const Variable& param) const;
  void set_state_step(const Variable& param, int64_t step);

 protected:
  struct State {
    ShardingSpec spec;
    DeviceMesh mesh;
    Shape shape;
    int64_t step = 0;
    std::map<std::string, DTensor> tensors;
  };
  // The state of a parameter (made with zeros of its layout on first use; checked against its layout after).
  State& state_for(const Variable& p, const std::vector<std::string>& names);
  // Parameter i's lr (lr_ times its group's scale) and weight decay (its group's, else `fallback`).
  double lr_of(size_t i) const { return lr_ * lr_scale_[i]; }
  double weight_decay_of(size_t i, double fallback) const { return weight_decay_[i].value_or(fallback); }
  std::vector<Variable> params_;
  std::vector<double> lr_scale_;
  std::vector<std::optional<double>> weight_decay_;
  double lr_ = 1e-3;
  int64_t steps_ = 0;

 private:
  std::map<const VariableImpl*, State> state_;
};

struct SgdOptions {
  double lr = 1e-2, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  SGD(std::vector<Variable> params, SgdOptions options = {});
  SGD(const std::vector<ParamGroup>& groups, SgdOptions options = {});
  void step() override;
  std::vector<std::string> state_names() const override;

 private:
  SgdOptions o_;
};

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Variable> params, AdamWOptions options = {});
  AdamW(const std::vector<ParamGroup>& groups, AdamWOptions options = {});
  void step() override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  AdamWOptions o_;
};

// The global 2-norm of all gradients, exact across shards and meshes: each parameter's local sum of squares is
// summed over the mesh dims on which its gradient is sharded (replicated dims hold copies and are counted once),
// then the sums are added. Collective over every mesh involved (each rank calls it with the same parameters).
double grad_norm(const std::vector<Variable>& params);
// Scales the gradients by min(1, max_norm / (norm + 1e-6)) and returns the norm before clipping (PyTorch's
// clip_grad_norm_).
double clip_grad_norm_(const std::vector<Variable>& params, double max_norm);
// clip_grad_norm_'s scaling for a norm computed elsewhere (over pipeline stages: pipeline::clip_grad_norm_): the
// gradients times max_norm / (norm + 1e-6) when that is below 1.
void clip_grads_to_norm_(const std::vector<Variable>& params, double max_norm, double norm);

// Reduces the gradients over a data-parallel mesh (1-d: the dp dim; kAvg averages, kSum adds) with one all-reduce
// per dtype and device (the local gradients are packed into one buffer). Every rank of that mesh calls it with the
// same parameters.
void all_reduce_gradients(const std::vector<Variable>& params, const DeviceMesh& dp_mesh, ReduceOp op = ReduceOp::kAvg);

}  // namespace dt::nn
