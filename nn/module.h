// Module: named parameters, buffers and children; one call path that runs the hooks; deferred initialization.
//
//   struct Mlp : nn::Module {
//     std::shared_ptr<nn::Linear> fc1, fc2;
//     Mlp(int64_t d) : Module("Mlp") {
//       fc1 = register_module("fc1", std::make_shared<nn::Linear>(d, 4 * d));
//       fc2 = register_module("fc2", std::make_shared<nn::Linear>(4 * d, d));
//     }
//     std::vector<nn::Variable> forward(const std::vector<nn::Variable>& in) override {
//       return {(*fc2)(nn::gelu((*fc1)(in[0])))};
//     }
//   };
//   auto m = std::make_shared<Mlp>(64);
//   nn::parallelize_module(m, mesh, {{"fc1", nn::ColwiseParallel()}, {"fc2", nn::RowwiseParallel()}});
//   m->materialize(mesh, /*seed=*/0);   // each rank allocates and fills only its blocks
//
// Parameters are declared (shape, dtype, initializer) and allocated later by materialize(), with the placements a
// parallel plan gave them (default Replicate), so a sharded model never holds a whole parameter on one rank. The
// initial values depend only on (seed, the parameter's fully-qualified name, global index): any mesh and
// placement give the model a single process would make. Names are PyTorch's: children and parameters joined by
// '.', in registration order; a parameter registered under two names (tied weights) is listed once, under the first.
//
// Hooks (Note [Module hook order] in module.cc): forward pre-hooks may replace the inputs, forward hooks the
// outputs; backward pre-hooks run once per backward before the first node of this module's backward, backward hooks
// once after the gradients of its inputs (or, when no input needs a gradient, at the end of the backward).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/variable.h"

namespace dt::nn {

// How a parameter's initial value is made from its (seed, global index) stream.
struct Init {
  enum class Kind { kZeros, kOnes, kNormal, kUniform, kTruncNormal } kind = Kind::kZeros;
  double a = 0, b = 0;    // normal and truncated normal: mean, std; uniform: lo, hi
  double lo = 0, hi = 0;  // truncated normal: the bounds (absolute, as torch.nn.init.trunc_normal_'s a and b)
  static Init zeros() { return {Kind::kZeros, 0, 0, 0, 0}; }
  static Init ones() { return {Kind::kOnes, 0, 0, 0, 0}; }
  static Init normal(double mean, double std) { return {Kind::kNormal, mean, std, 0, 0}; }
  static Init uniform(double lo, double hi) { return {Kind::kUniform, lo, hi, 0, 0}; }
  static Init trunc_normal(double mean, double std, double lo, double hi) {
    return {Kind::kTruncNormal, mean, std, lo, hi};
  }
};

class Module;
using ModulePtr = std::shared_ptr<Module>;
using StateDict = std::vector<std::pair<std::string, DTensor>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The one call path: pre-forward hooks, forward (recomputed in backward when checkpointed), forward hooks,
  // backward hooks attached.
  std::vector<Variable> operator()(const std::vector<Variable>& inputs);
  Variable operator()(const Variable& x) { return (*this)(std::vector<Variable>{x}).at(0); }
  virtual std::vector<Variable> forward(const std::vector<Variable>& inputs) = 0;

  const std::string& type_name() const { return type_name_; }

  // ---- registration ----
  // Declares a parameter (allocated by materialize). Names: non-empty, no '.', unique within the module.
  Variable register_parameter(const std::string& name, Shape shape, Init init, DType dtype = DType::f32);
  // Registers an existing Variable (tied weights: the same handle under a second name).
  Variable register_parameter(const std::string& name, Variable param);
  void register_buffer(const std::string& name, DTensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }

  // ---- inspection (fully-qualified names, registration order, duplicates once) ----
  std::vector<std::pair<std::string, Variable>> named_parameters(bool recurse = true) const;
  std::vector<Variable> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, DTensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, ModulePtr>> named_modules();  // "" is this module
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  ModulePtr get_submodule(const std::string& fqn);  // InvalidArgument naming the missing part
  Variable get_parameter(const std::string& fqn);
  std::string describe() const;  // the tree with parameter shapes and placements
  // The global element count of every parameter declared in the tree (tied ones once), materialized or not: what
  // the model will hold, known before anything is allocated.
  int64_t declared_numel() const;

  // ---- placement and initialization ----
  // The placements a parameter will be (or is) laid out with (parallel styles set them). Name local to this module.
  void set_parameter_layout(const std::string& name, const DeviceMesh& mesh, std::vector<Placement> placements);
  const DeviceMesh& parameter_mesh(const std::string& name) const;
  // Replaces the initializer of a declared parameter that is not materialized yet (a model's init scheme, set after
  // its layers declared theirs). Name local to this module.
  void set_parameter_init(const std::string& name, Init init);
  // Allocates every declared parameter that has no payload yet: on its layout's mesh and placements, else on
  // `mesh` replicated; values from (seed, fqn, global index). Buffers are made by the modules themselves. `dtype`,
  // when given, overrides every declared parameter's dtype (e.g. f64 for gradient checks against finite
  // differences); the values are the same draws, rounded to that dtype.
  void materialize(const DeviceMesh& mesh, uint64_t seed, std::optional<DType> dtype = std::nullopt);
  // The same without filling (PyTorch's to_empty): for parameters about to be loaded (a checkpoint, a Hugging Face
  // folder), which skips drawing every initial value. Their contents are undefined until loaded.
  void materialize_empty(const DeviceMesh& mesh, std::optional<DType> dtype = std::nullopt);
  bool materialized() const;

  // ---- state ----
  StateDict state_dict() const;  // parameters then buffers, by fully-qualified name
  // Copies values into the parameters (redistributed to each parameter's placements; identity kept). strict: every
  // parameter must be given and no unknown name (InvalidArgument listing them).
  void load_state_dict(const StateDict& state, bool strict = true);
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Recompute this module's forward in backward instead of keeping its activations.
  void set_activation_checkpointing(bool on) { activation_checkpointing_ = on; }
  bool activation_checkpointing() const { return activation_checkpointing_; }

  // ---- hooks ----
  using ForwardPreHook = std::function<std::optional<std::vector<Variable>>(Module&, const std::vector<Variable>&)>;
  using ForwardHook = std::function<std::optional<std::vector<Variable>>(Module&, const std::vector<Variable>& inputs,
                                                                         const std::vector<Variable>& outputs)>;
  using BackwardHook = std::function<void(Module&)>;
  int register_forward_pre_hook(ForwardPreHook hook);
  int register_forward_hook(ForwardHook hook);
  int register_backward_pre_hook(BackwardHook hook);
  int register_backward_hook(BackwardHook hook);
  void remove_hook(int id);

 protected:
  void add_child(const std::string& name, ModulePtr child);
  // A module that draws random numbers per call (Dropout) returns its call counter: activation checkpointing saves
  // the counters of a module's subtree before its forward and sets them back for the recompute, so the recomputed
  // forward draws what the forward drew.
  virtual uint64_t* rng_counter() { return nullptr; }

 private:
  struct ParamSlot {
    std::string name;
    Variable var;
    Shape shape;
    DType dtype = DType::f32;
    Init init;
    DeviceMesh mesh;                    // set by a layout, else the materialize() mesh
    std::vector<Placement> placements;  // empty: Replicate
    bool owner = true;                  // false for a second name of a tied parameter
  };
  void check_new_name(const std::string& name) const;
  ParamSlot& slot(const std::string& name);
  const ParamSlot& slot(const std::string& name) const;
  void collect_parameters(const std::string& prefix, std::vector<std::pair<std::string, Variable>>& out,
                          std::vector<const VariableImpl*>& seen) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, ModulePtr>>& out);
  void materialize_own(const std::string& prefix, const DeviceMesh& mesh, uint64_t seed, std::optional<DType> dtype,
                       bool fill);
  std::vector<Variable> call_forward(const std::vector<Variable>& inputs);
  void attach_backward_hooks(const std::vector<Variable>& inputs, std::vector<Variable>& outputs,
                             std::vector<Variable>& hooked_inputs);

  std::string type_name_;
  std::vector<ParamSlot> params_;
  std::vector<std::pair<std::string, DTensor>> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  bool training_ = true;
  bool activation_checkpointing_ = false;
  int next_hook_id_ = 0;
  std::vector<std::pair<int, ForwardPreHook>> forward_pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> forward_hooks_;
  std::vector<std::pair<int, BackwardHook>> backward_pre_hooks_;
  std::vector<std::pair<int, BackwardHook>> backward_hooks_;
};

// An ordered container of modules named "0", "1", ... (PyTorch's ModuleList); it has no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void append(ModulePtr m) {
    add_child(std::to_string(size_), std::move(m));
    ++size_;
  }
  int64_t size() const { return size_; }
  std::vector<Variable> forward(const std::vector<Variable>&) override;

 private:
  int64_t size_ = 0;
};

// The seed of a parameter's stream: splitmix of the model seed and the fully-qualified name.
uint64_t parameter_seed(uint64_t seed, const std::string& fqn);

}  // namespace dt::nn
