// The autograd engine (nn/autograd.h) and Variable's methods that touch the graph.
//
// Note [Autograd hook order]
// One backward() runs, in this order:
//   1. The graph reachable from the roots is found and every node and leaf counts the edges that feed it.
//   2. Nodes run in decreasing sequence number among those whose gradients are complete (all consumers ran). Before
//      a node runs: its pre-hooks (module pre-backward, once per backward), then the hooks on each output's gradient
//      (tensor hooks, retain_grad) in registration order. Then the node's backward; its saved tensors are dropped
//      unless retain_graph; then its post-hooks (module post-backward on the identity node before a module's inputs).
//   3. A leaf's gradient is complete when every edge into it delivered: its tensor hooks run, the sum is brought to
//      the leaf's placements (a Partial sum is reduced here, once) and added to .grad(), then its
//      post-accumulate-grad hooks run, exactly once per backward.
//   4. After the last node: the callbacks queued with queue_callback during this backward, in queue order (a callback
//      may queue more; they run too).
// A missing output gradient (an output not on the path to the roots) is given to the node as zeros.
#include "nn/autograd.h"

#include <map>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/memory_stats.h"
#include "dtensor/factory.h"
#include "dtensor/ops.h"
#include "nn/variable_impl.h"

namespace dt::nn {

namespace {

thread_local uint64_t t_next_seq = 0;
thread_local bool t_grad_enabled = true;
thread_local int t_backward_depth = 0;
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
thread_local WeightGradQueue* t_weight_queue = nullptr;

}  // namespace

// ---- grad mode ----

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { t_grad_enabled = prev_; }

// ---- tensors of a given layout ----

DTensor zeros_like(const OutputLayout& m) {
  return dt::zeros(m.shape, m.mesh, m.spec.placements(),
                   {.dtype = m.dtype, .seed = 0, .shard_order = m.spec.shard_order()});
}

DTensor zeros_like(const DTensor& t) { return zeros_like(OutputLayout{t.mesh(), t.spec(), t.shape(), t.dtype()}); }

DTensor ones_like(const DTensor& t) {
  std::vector<Placement> p = t.placements();
  for (Placement& x : p)
    if (is_partial(x)) x = Replicate{};
  return dt::ones(t.shape(), t.mesh(), p, {.dtype = t.dtype(), .seed = 0, .shard_order = t.spec().shard_order()});
}

DTensor accumulate_grad(const DTensor& a, const DTensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b.redistribute_like(a));
}

// ---- nodes ----

Node::Node(std::string name, std::vector<Edge> next, BackwardFn fn)
    : name_(std::move(name)), seq_(t_next_seq++), next_(std::move(next)), fn_(std::move(fn)) {}

int Node::add_output_hook(int output_nr, GradHook hook) {
  const int id = next_hook_id_++;
  output_hooks_.emplace_back(id, output_nr, std::move(hook));
  return id;
}

void Node::remove_output_hook(int id) {
  std::erase_if(output_hooks_, [id](const auto& h) { return std::get<0>(h) == id; });
}

bool any_requires_grad(const std::vector<Variable>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Variable& v : inputs)
    if (v.requires_grad()) return true;
  return false;
}

std::vector<Variable> record(const std::string& name, const std::vector<Variable>& inputs, std::vector<DTensor> outputs,
                             BackwardFn fn) {
  std::vector<Variable> result;
  result.reserve(outputs.size());
  if (!any_requires_grad(inputs)) {
    for (DTensor& o : outputs) result.emplace_back(std::move(o));
    return result;
  }
  std::vector<Edge> edges(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Variable& v = inputs[i];
    if (!v.requires_grad()) continue;
    if (v.is_leaf())
      edges[i].leaf = v.impl_ptr();
    else
      edges[i] = Edge{v.grad_fn(), nullptr, v.output_nr()};
  }
  auto node = std::make_shared<Node>(name, std::move(edges), std::move(fn));
  for (const DTensor& o : outputs) node->outputs_.push_back(OutputLayout{o.mesh(), o.spec(), o.shape(), o.dtype()});
  for (size_t i = 0; i < outputs.size(); ++i)
    result.push_back(Variable::make_output(std::move(outputs[i]), node, int(i)));
  return result;
}

Variable record_one(const std::string& name, const std::vector<Variable>& inputs, DTensor output, BackwardFn fn) {
  return record(name, inputs, {std::move(output)}, std::move(fn))[0];
}

// ---- the engine ----

class Engine {
 public:
  static void run(const std::vector<Variable>& roots, const std::vector<DTensor>& grads, bool retain_graph);
};

namespace {

DTensor run_hooks(const std::vector<std::pair<int, GradHook>>& hooks, DTensor g) {
  for (const auto& [id, hook] : hooks) {
    DTensor r = hook(g);
    if (r.defined()) g = std::move(r);
  }
  return g;
}

// A leaf's complete gradient of one backward: its tensor hooks, then its grad sink (FSDP) or deliver_grad.
void accumulate_into_leaf(const Variable& leaf, DTensor g) {
  const VariableImpl& impl = *leaf.impl();
  g = run_hooks(impl.hooks, std::move(g));
  if (impl.grad_sink) {
    impl.grad_sink(g);
    return;
  }
  leaf.deliver_grad(std::move(g));
}

struct CallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* prev;
  CallbackScope() : prev(t_callbacks) {
    t_callbacks = &callbacks;
    ++t_backward_depth;
  }
  ~CallbackScope() {
    t_callbacks = prev;
    --t_backward_depth;
  }
};

}  // namespace

void Engine::run(const std::vector<Variable>& roots, const std::vector<DTensor>& grads, bool retain_graph) {
  DT_CHECK_ARG(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(), " roots but ", grads.size(),
               " gradients");
  CallbackScope scope;
  // 1. Discover the graph and count the edges into every node and leaf.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<VariableImpl*, int> leaf_deps;
  std::unordered_map<Node*, std::vector<DTensor>> buffers;
  std::unordered_map<VariableImpl*, DTensor> leaf_buffers;
  std::vector<Node*> stack;
  auto visit = [&](Node* n) {
    if (deps.emplace(n, 0).second) stack.push_back(n);
  };
  for (const Variable& r : roots)
    if (r.grad_fn()) visit(r.grad_fn().get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    DT_CHECK_ARG(!n->released(), "backward: the graph through ", n->name(),
                 " was already freed by an earlier backward (pass retain_graph=true to the first backward to run "
                 "backward twice)");
    for (const Edge& e : n->next_edges()) {
      if (e.node) {
        visit(e.node.get());
        ++deps[e.node.get()];
      } else if (e.leaf) {
        ++leaf_deps[e.leaf.get()];
      }
    }
  }
  auto cmp = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);

  // Seed the roots' gradients.
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& r = roots[i];
    DT_CHECK_ARG(r.defined(), "backward: root ", i, " is undefined");
    DT_CHECK_ARG(r.requires_grad(), "backward: root ", i, " (shape ", shape_str(r.shape()),
                 ") does not require grad: no input of its computation requires grad");
    DTensor g = i < grads.size() ? grads[i] : DTensor();
    if (!g.defined()) {
      DT_CHECK_ARG(r.numel() == 1,
                   "backward: a gradient can be implied only for a one-element output; this one has "
                   "shape ",
                   shape_str(r.shape()), " (pass the gradient)");
      g = ones_like(r.data());
    }
    DT_CHECK_ARG(g.shape() == r.shape(), "backward: the gradient has shape ", shape_str(g.shape()), ", the output ",
                 shape_str(r.shape()));
    if (r.is_leaf()) {
      leaf_buffers[r.impl()] = accumulate_grad(leaf_buffers[r.impl()], g);
      continue;
    }
    std::vector<DTensor>& buf = buffers[r.grad_fn().get()];
    buf.resize(r.grad_fn()->outputs().size());
    buf[size_t(r.output_nr())] = accumulate_grad(buf[size_t(r.output_nr())], g);
  }
  for (auto& [n, d] : deps)
    if (d == 0) ready.push(n);
  for (const Variable& r : roots)
    if (r.is_leaf() && leaf_deps[r.impl()] == 0 && leaf_buffers.count(r.impl())) {
      DTensor total = std::move(leaf_buffers[r.impl()]);
      leaf_buffers.erase(r.impl());
      accumulate_into_leaf(r, std::move(total));
    }

  // 2./3. Run the nodes.
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<DTensor> g = std::move(buffers[n]);
    buffers.erase(n);
    g.resize(n->outputs().size());
    for (const auto& hook : n->pre_hooks_) hook();
    n->pre_hooks_.clear();
    for (size_t o = 0; o < g.size(); ++o) {
      if (!g[o].defined()) g[o] = zeros_like(n->outputs()[o]);
      for (const auto& [id, nr, hook] : n->output_hooks_) {
        if (size_t(nr) != o) continue;
        DTensor r = hook(g[o]);
        if (r.defined()) g[o] = std::move(r);
      }
    }
    DT_ASSERT(n->fn_, "node ", n->name(), " ran twice");
    std::vector<DTensor> in = n->fn_(g);
    g.clear();
    if (!retain_graph) n->fn_ = nullptr;
    DT_ASSERT(in.size() == n->next_edges().size(), "backward of ", n->name(), " returned ", in.size(),
              " gradients for ", n->next_edges().size(), " inputs");
    for (size_t i = 0; i < in.size(); ++i) {
      const Edge& e = n->next_edges()[i];
      if (e.node) {
        Node* p = e.node.get();
        if (in[i].defined()) {
          std::vector<DTensor>& buf = buffers[p];
          buf.resize(p->outputs().size());
          buf[size_t(e.output_nr)] = accumulate_grad(buf[size_t(e.output_nr)], in[i]);
        }
        if (--deps[p] == 0) ready.push(p);
      } else if (e.leaf) {
        VariableImpl* leaf = e.leaf.get();
        if (in[i].defined()) leaf_buffers[leaf] = accumulate_grad(leaf_buffers[leaf], in[i]);
        if (--leaf_deps[leaf] == 0) {
          DTensor total = std::move(leaf_buffers[leaf]);
          leaf_buffers.erase(leaf);
          if (total.defined()) accumulate_into_leaf(Variable::from_impl(e.leaf), std::move(total));
        }
      }
    }
    for (const auto& hook : n->post_hooks_) hook();
    if (!retain_graph) n->post_hooks_.clear();
  }
  // 4. Callbacks.
  for (size_t i = 0; i < scope.callbacks.size(); ++i) {
    auto cb = scope.callbacks[i];
    cb();
  }
}

}  // namespace dt::nn

namespace dt::nn {

void backward(const std::vector<Variable>& roots, const std::vector<DTensor>& grads, bool retain_graph) {
  Engine::run(roots, grads, retain_graph);
}

void queue_callback(std::function<void()> fn) {
  DT_CHECK_ARG(t_callbacks != nullptr, "queue_callback: not inside a backward (callbacks run at the end of one)");
  t_callbacks->push_back(std::move(fn));
}

bool in_backward() { return t_backward_depth > 0; }

void WeightGradQueue::run() {
  std::vector<std::function<void()>> work = std::move(work_);
  work_.clear();
  for (auto& w : work) w();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue& queue) : prev_(t_weight_queue) { t_weight_queue = &queue; }
DeferWeightGrads::~DeferWeightGrads() { t_weight_queue = prev_; }

WeightGradQueue* deferred_weight_grads() { return t_weight_queue; }

bool can_defer_grad(const Variable& weight) {
  return weight.defined() && weight.is_leaf() && weight.requires_grad() && !weight.impl()->grad_sink;
}

void deliver_leaf_grad(const Variable& leaf, DTensor grad) {
  DT_CHECK_ARG(leaf.defined() && leaf.is_leaf(), "deliver_leaf_grad: not a leaf");
  accumulate_into_leaf(leaf, std::move(grad));
}

}  // namespace dt::nn
