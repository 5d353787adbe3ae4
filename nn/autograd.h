// The autograd engine: nodes recorded in forward order on a per-thread counter (the tape), replayed in reverse.
//
// Every op of nn/ that sees an input requiring grad records one Node: the backward closure (which owns the tensors
// it saved and is dropped after it runs), the edges to its inputs' producers (nodes or leaves) and the metadata of
// its outputs. Outputs hold their node strongly and a node holds its inputs' nodes strongly, never the reverse, so
// there are no cycles and an unused graph is freed with its outputs. backward() runs the nodes reachable from the
// root in decreasing sequence number: the reverse of the order in which this thread recorded them, which is the same
// on every rank that ran the same forward, so the collectives inside backward rules are issued in the same order on
// every rank (Note [Autograd hook order] in autograd.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/variable.h"

namespace dt::nn {

// Gradients of a node's inputs from the gradients of its outputs. grads[i] is defined for every output (a missing
// one is given as zeros); the result has one entry per input (undefined where no gradient flows or none is needed,
// see needs_input_grad).
using BackwardFn = std::function<std::vector<DTensor>(const std::vector<DTensor>& grads)>;

struct Edge {
  std::shared_ptr<Node> node;          // the producer of the input, or
  std::shared_ptr<VariableImpl> leaf;  // a leaf that requires grad
  int output_nr = 0;
  bool valid() const { return node != nullptr || leaf != nullptr; }
};

// The layout of a node's output (dt::OutputMeta, a rule's shape and dtype, is the op funnel's): the gradient that
// flows back to it takes this layout, and zeros of it stand in for a gradient that does not flow.
struct OutputLayout {
  DeviceMesh mesh;
  ShardingSpec spec;
  Shape shape;
  DType dtype = DType::f32;
};

class Node {
 public:
  Node(std::string name, std::vector<Edge> next, BackwardFn fn);
  const std::string& name() const { return name_; }
  uint64_t sequence_nr() const { return seq_; }
  const std::vector<Edge>& next_edges() const { return next_; }
  bool needs_input_grad(size_t i) const { return i < next_.size() && next_[i].valid(); }
  const std::vector<OutputLayout>& outputs() const { return outputs_; }

  // Hooks on the gradient of output i (a non-leaf Variable's register_hook / retain_grad).
  int add_output_hook(int output_nr, GradHook hook);
  void remove_output_hook(int id);
  // Runs once before this node's backward (module pre-backward hooks are attached here).
  void add_pre_hook(std::function<void()> hook) { pre_hooks_.push_back(std::move(hook)); }
  void add_post_hook(std::function<void()> hook) { post_hooks_.push_back(std::move(hook)); }

  bool released() const { return !fn_; }

 private:
  friend class Engine;
  friend class Variable;
  friend std::vector<Variable> record(const std::string&, const std::vector<Variable>&, std::vector<DTensor>,
                                      BackwardFn);
  std::string name_;
  uint64_t seq_;
  std::vector<Edge> next_;
  BackwardFn fn_;
  std::vector<OutputLayout> outputs_;
  std::vector<std::tuple<int, int, GradHook>> output_hooks_;  // (id, output_nr, hook)
  int next_hook_id_ = 0;
  std::vector<std::function<void()>> pre_hooks_;
  std::vector<std::function<void()>> post_hooks_;
};

// Whether any of the inputs requires grad while grad mode is on (then an op records a node).
bool any_requires_grad(const std::vector<Variable>& inputs);
// Records a node for an op with these inputs and outputs, and returns the outputs as Variables (requiring grad,
// with the node as grad_fn). When nothing requires grad (or grad mode is off) the outputs are plain Variables and
// `fn` is dropped. Inputs may include undefined Variables (absent optional inputs: no edge).
std::vector<Variable> record(const std::string& name, const std::vector<Variable>& inputs, std::vector<DTensor> outputs,
                             BackwardFn fn);
Variable record_one(const std::string& name, const std::vector<Variable>& inputs, DTensor output, BackwardFn fn);

// Backward from several roots at once (each with its gradient; undefined = ones for a one-element root).
void backward(const std::vector<Variable>& roots, const std::vector<DTensor>& grads = {}, bool retain_graph = false);

// Queues a callback to run once the current backward has finished (every gradient accumulated, every hook run).
// Outside a backward it is an error (InvalidArgument).
void queue_callback(std::function<void()> fn);
// Whether this thread is inside backward().
bool in_backward();

// Note [Deferred weight gradients]
// Zero-bubble pipeline schedules split a backward in two: I, the gradients of the inputs (on the critical path to the
// previous stage), and W, the weights' (run later, to fill a bubble). While a DeferWeightGrads scope is open on a
// thread, an op that supports it (linear) computes its input gradient only and queues the weight's into the scope's
// WeightGradQueue; queue.run() computes them later and delivers each to its leaf as backward would (the leaf's hooks,
// then deliver_grad). Only weights that are plain leaves are deferred: one with a grad sink (FSDP reduces a group's
// gradients at the end of its backward) keeps its gradient in I, as does every op without support. The gradients are
// the same numbers either way; only when they are computed moves.
class WeightGradQueue {
 public:
  void push(std::function<void()> work) { work_.push_back(std::move(work)); }
  // Computes and delivers the queued weight gradients, in the order they were queued; the queue is then empty.
  void run();
  size_t size() const { return work_.size(); }

 private:
  std::vector<std::function<void()>> work_;
};

class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue& queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  WeightGradQueue* prev_;
};

// The queue of this thread's innermost DeferWeightGrads scope, or null.
WeightGradQueue* deferred_weight_grads();
// Whether `weight`'s gradient may be deferred: a leaf that requires grad and has no grad sink.
bool can_defer_grad(const Variable& weight);
// Delivers a gradient computed outside backward to a leaf as backward would: its tensor hooks, then deliver_grad.
void deliver_leaf_grad(const Variable& leaf, DTensor grad);

// Sums two gradients of one tensor (their placements may differ: the second is brought to the first's).
DTensor accumulate_grad(const DTensor& a, const DTensor& b);
// Zeros with t's global shape, dtype, mesh and placements (Partial: zeros are a valid partial value).
DTensor zeros_like(const DTensor& t);
DTensor zeros_like(const OutputLayout& meta);
DTensor ones_like(const DTensor& t);  // Partial placements become Replicate

}  // namespace dt::nn
