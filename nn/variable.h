// Variable: a DTensor that autograd tracks. A stable handle (shared identity) over a payload that can be swapped
// (set_data), so modules, optimizers and user references stay valid while FSDP gathers and frees the payload.
//
//   nn::Variable w(dt::randn({4, 3}, mesh, {dt::Replicate()}), /*requires_grad=*/true);
//   nn::Variable y = nn::sum(nn::matmul(x, w));
//   y.backward();            // w.grad() is a DTensor with w's placements
//
// Gradients: a leaf's .grad() has the leaf's placements (a Partial gradient is reduced when it is accumulated, once
// per backward); a non-leaf keeps its gradient only after retain_grad(). Hook order: Note [Autograd hook order]
// in nn/autograd.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/dtensor.h"

namespace dt::nn {

class Node;
class Variable;

// A tensor hook: called with the gradient of the tensor; returns a replacement or an undefined DTensor to keep it.
using GradHook = std::function<DTensor(const DTensor& grad)>;
// Called after a leaf's gradient was accumulated into .grad() (once per backward).
using PostAccumulateGradHook = std::function<void(Variable& leaf)>;

// A leaf's complete gradient of one backward, taken instead of .grad() (FSDP's group reduces it first).
using GradSink = std::function<void(const DTensor& grad)>;

// The state behind a handle: nn's own (nn/variable_impl.h); nothing outside nn reads or writes it (check_layering).
struct VariableImpl;

class Variable {
 public:
  Variable() = default;
  // A leaf.
  explicit Variable(DTensor data, bool requires_grad = false);
  // An output of an autograd node (used by nn's ops).
  static Variable make_output(DTensor data, std::shared_ptr<Node> grad_fn, int output_nr);
  // Another handle on an existing Variable (the engine hands leaves to their hooks this way).
  static Variable from_impl(std::shared_ptr<VariableImpl> impl);

  bool defined() const;
  const DTensor& data() const;
  // Replaces the payload, keeping the identity (FSDP swaps sharded and unsharded payloads this way).
  void set_data(DTensor data) const;

  bool requires_grad() const;
  // Leaves only (a computed Variable requires grad when an input does).
  Variable& requires_grad_(bool on = true);
  bool is_leaf() const;
  const std::shared_ptr<Node>& grad_fn() const;
  int output_nr() const;

  const DTensor& grad() const;
  void set_grad(DTensor grad) const;
  void zero_grad() const;  // set to none (PyTorch's default set_to_none=True)
  // The one way a leaf receives a gradient (autograd's engine, and a grad sink's owner once it reduced one): `grad`
  // is brought to the leaf's layout and dtype (redistribute_like, then a cast), added to .grad() (or becomes it),
  // its memory counted as gradients, then the post-accumulate-grad hooks run. Leaves only.
  void deliver_grad(DTensor grad) const;
  // When set (FSDP), this leaf's complete gradient of one backward (after its tensor hooks, before any
  // redistribution) goes to the sink instead of deliver_grad: the sink's owner calls deliver_grad once it reduced the
  // gradient (fsdp/fully_shard.h). An empty sink restores the default. Leaves only.
  void set_grad_sink(GradSink sink) const;

  // Backward from this Variable: a scalar (one element) unless `gradient` is given (the same shape). Every rank of
  // the mesh must call it, after the same forward. retain_graph keeps the saved tensors for a second backward.
  void backward(const DTensor& gradient = DTensor(), bool retain_graph = false) const;
  // The same payload, no history, requires_grad false.
  Variable detach() const;
  // Keep the gradient of this non-leaf in grad() after backward.
  void retain_grad() const;
  int register_hook(GradHook hook) const;
  void remove_hook(int id) const;
  int register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  void remove_post_accumulate_grad_hook(int id) const;

  // The payload's metadata.
  const Shape& shape() const { return data().shape(); }
  int64_t dim() const { return data().dim(); }
  int64_t numel() const { return data().numel(); }
  DType dtype() const { return data().dtype(); }
  const DeviceMesh& mesh() const { return data().mesh(); }
  const std::vector<Placement>& placements() const { return data().placements(); }
  const ShardingSpec& spec() const { return data().spec(); }
  const Tensor& to_local() const { return data().to_local(); }
  Tensor full_tensor() const { return data().full_tensor(); }

  const std::string& name() const;
  void set_name(std::string name) const;
  // Identity: two handles on the same Variable.
  bool same(const Variable& other) const { return impl_ == other.impl_; }
  VariableImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<VariableImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// Gradient mode (per thread, like the tape). Under NoGradGuard ops record nothing.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};
// Turns recording back on inside a NoGradGuard (activation checkpointing's recompute).
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace dt::nn
