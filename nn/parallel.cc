// Tensor-parallel styles and parallelize_module (nn/parallel.h).
#include "nn/parallel.h"

#include <fnmatch.h>

#include <sstream>

#include "core/error.h"
#include "nn/layers.h"

namespace dt::nn {

namespace {

Placement normalized(const Placement& p, int64_t ndim) {
  if (const Shard* s = std::get_if<Shard>(&p)) return Shard{s->dim < 0 ? s->dim + ndim : s->dim};
  return p;
}

// x moved to `want` (a placement of the 1-d mesh), differentiably; checks that the dim exists.
Variable to_layout(const Variable& x, const Placement& want, const std::string& fqn, const char* what) {
  if (!x.defined()) return x;
  DT_CHECK_ARG(x.mesh().ndim() == 1, "parallelize_module: ", what, " of ", fqn, " lives on a ", x.mesh().ndim(),
               "-d mesh; tensor parallelism runs on a 1-d mesh (mesh[\"tp\"])");
  const Placement p = normalized(want, x.dim());
  if (const Shard* s = std::get_if<Shard>(&p))
    DT_CHECK_ARG(s->dim >= 0 && s->dim < x.dim(), "parallelize_module: ", fqn, " wants its ", what, " sharded on dim ",
                 s->dim, ", which a tensor of shape ", shape_str(x.shape()), " does not have");
  if (x.placements()[0] == p) return x;
  return redistribute(x, {p});
}

void check_mesh(const DeviceMesh& mesh) {
  DT_CHECK_ARG(mesh.defined() && mesh.ndim() == 1, "parallelize_module: the mesh must be 1-d (mesh[\"tp\"]), got ",
               mesh.defined() ? mesh.to_string() : std::string("an undefined mesh"));
}

void set_layout(Module& m, const std::string& fqn, const std::string& param, const DeviceMesh& mesh, Placement p,
                int64_t ndim) {
  const Placement n = normalized(p, ndim);
  if (const Shard* s = std::get_if<Shard>(&n))
    DT_CHECK_ARG(s->dim >= 0 && s->dim < ndim, "parallelize_module: ", fqn, ".", param, " has ", ndim,
                 " dims, the style shards dim ", s->dim);
  m.set_parameter_layout(param, mesh, {n});
}

// Per positional input or output: the placement it is declared to have (a style's input_layouts /
// output_layouts given; nullopt: anything) and the one to move it to (nullopt: leave it).
struct Io {
  std::vector<std::optional<Placement>> given, want;
};

// x checked against its declared placement: the plan says what arrives, so another placement is the plan's bug (or
// the caller's), named, rather than silently redistributed.
void check_given(const Variable& x, const std::optional<Placement>& given, const std::string& fqn, const char* what,
                 const std::string& style) {
  if (!given || !x.defined() || x.mesh().ndim() != 1) return;
  const Placement p = normalized(*given, x.dim());
  DT_CHECK_ARG(x.placements()[0] == p, "parallelize_module: ", style, " of ", fqn, " declares its ", what, " ",
               dt::to_string(p), " (", what, "_layouts), but it arrived ", dt::to_string(x.placements()[0]),
               "; fix the plan or redistribute the ", what, " first");
}

std::vector<Variable> apply_io(const std::vector<Variable>& xs, const Io& io, const std::string& fqn, const char* what,
                               const std::string& style) {
  std::vector<Variable> r = xs;
  for (size_t i = 0; i < r.size(); ++i) {
    if (i < io.given.size()) check_given(r[i], io.given[i], fqn, what, style);
    if (i < io.want.size() && io.want[i]) r[i] = to_layout(r[i], *io.want[i], fqn, what);
  }
  return r;
}

// Installs an input hook and an output hook (none for an empty Io).
void install_io(Module& m, const std::string& fqn, const std::string& style, Io in, Io out) {
  if (!in.given.empty() || !in.want.empty())
    m.register_forward_pre_hook([in, fqn, style](Module&, const std::vector<Variable>& xs) {
      return std::optional<std::vector<Variable>>(apply_io(xs, in, fqn, "input", style));
    });
  if (!out.given.empty() || !out.want.empty())
    m.register_forward_hook([out, fqn, style](Module&, const std::vector<Variable>&, const std::vector<Variable>& ys) {
      return std::optional<std::vector<Variable>>(apply_io(ys, out, fqn, "output", style));
    });
}

class Colwise : public ParallelStyle {
 public:
  explicit Colwise(ColwiseOptions o) : o_(std::move(o)) {}
  std::string name() const override { return "ColwiseParallel"; }
  void apply(Module& m, const std::string& fqn, const DeviceMesh& mesh) const override {
    const Placement out = o_.output_layouts.value_or(Shard{-1});
    if (auto* lin = dynamic_cast<Linear*>(&m)) {
      set_layout(m, fqn, "weight", mesh, Shard{0}, 2);
      if (lin->bias.impl()) set_layout(m, fqn, "bias", mesh, Shard{0}, 1);
      install_io(m, fqn, name(), {{o_.input_layouts}, {Placement(Replicate{})}}, {{}, {out}});
    } else if (dynamic_cast<Embedding*>(&m)) {
      set_layout(m, fqn, "weight", mesh, Shard{1}, 2);
      install_io(m, fqn, name(), {{o_.input_layouts}, {Placement(Replicate{})}}, {{}, {out}});
    } else {
      DT_THROW(InvalidArgument, "parallelize_module: ColwiseParallel applies to Linear or Embedding, but ", fqn,
               " is a ", m.type_name());
    }
  }

 private:
  ColwiseOptions o_;
};

class Rowwise : public ParallelStyle {
 public:
  explicit Rowwise(RowwiseOptions o) : o_(std::move(o)) {}
  std::string name() const override { return "RowwiseParallel"; }
  void apply(Module& m, const std::string& fqn, const DeviceMesh& mesh) const override {
    const Placement out = o_.output_layouts.value_or(Replicate{});
    if (auto* lin = dynamic_cast<Linear*>(&m)) {
      set_layout(m, fqn, "weight", mesh, Shard{1}, 2);
      if (lin->bias.impl()) set_layout(m, fqn, "bias", mesh, Replicate{}, 1);
      install_io(m, fqn, name(), {{o_.input_layouts}, {Placement(Shard{-1})}}, {{}, {out}});
    } else if (dynamic_cast<Embedding*>(&m)) {
      set_layout(m, fqn, "weight", mesh, Shard{0}, 2);
      install_io(m, fqn, name(), {{o_.input_layouts}, {Placement(Replicate{})}}, {{}, {out}});
    } else {
      DT_THROW(InvalidArgument, "parallelize_module: RowwiseParallel applies to Linear or Embedding, but ", fqn,
               " is a ", m.type_name());
    }
  }

 private:
  RowwiseOptions o_;
};

class SeqParallel : public ParallelStyle {
 public:
  explicit SeqParallel(int64_t dim) : dim_(dim) {}
  std::string name() const override { return "SequenceParallel"; }
  void apply(Module& m, const std::string& fqn, const DeviceMesh& mesh) const override {
    DT_CHECK_ARG(dynamic_cast<LayerNorm*>(&m) || dynamic_cast<RMSNorm*>(&m),
                 "parallelize_module: SequenceParallel applies to LayerNorm or RMSNorm, but ", fqn, " is a ",
                 m.type_name());
    for (auto& [name, p] : m.named_parameters(false)) set_layout(m, fqn, name, mesh, Replicate{}, 1);
    install_io(m, fqn, name(), {{}, {Placement(Shard{dim_})}}, {{}, {Placement(Shard{dim_})}});
  }

 private:
  int64_t dim_;
};

class PrepareIO : public ParallelStyle {
 public:
  PrepareIO(bool input, std::vector<std::optional<Placement>> given, std::vector<std::optional<Placement>> desired)
      : input_(input), given_(std::move(given)), desired_(std::move(desired)) {}
  std::string name() const override { return input_ ? "PrepareModuleInput" : "PrepareModuleOutput"; }
  void apply(Module& m, const std::string& fqn, const DeviceMesh&) const override {
    DT_CHECK_ARG(given_.size() == desired_.size(), "parallelize_module: ", name(), " for ", fqn, " has ", given_.size(),
                 " layouts but ", desired_.size(), " desired layouts");
    if (input_)
      install_io(m, fqn, name(), {given_, desired_}, {});
    else
      install_io(m, fqn, name(), {}, {given_, desired_});
  }

 private:
  bool input_;
  std::vector<std::optional<Placement>> given_, desired_;
};

}  // namespace

StylePtr ColwiseParallel(ColwiseOptions o) { return std::make_shared<Colwise>(std::move(o)); }
StylePtr RowwiseParallel(RowwiseOptions o) { return std::make_shared<Rowwise>(std::move(o)); }
StylePtr SequenceParallel(int64_t dim) { return std::make_shared<SeqParallel>(dim); }
StylePtr PrepareModuleInput(std::vector<std::optional<Placement>> in, std::vector<std::optional<Placement>> desired) {
  return std::make_shared<PrepareIO>(true, std::move(in), std::move(desired));
}
StylePtr PrepareModuleOutput(std::vector<std::optional<Placement>> out, std::vector<std::optional<Placement>> desired) {
  return std::make_shared<PrepareIO>(false, std::move(out), std::move(desired));
}

bool fqn_matches(const std::string& pattern, const std::string& fqn) {
  auto parts = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string p;
    while (std::getline(ss, p, '.')) v.push_back(p);
    return v;
  };
  const std::vector<std::string> a = parts(pattern), b = parts(fqn);
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (fnmatch(a[i].c_str(), b[i].c_str(), 0) != 0) return false;
  return true;
}

void parallelize_module(const ModulePtr& module, const DeviceMesh& mesh, const ParallelPlan& plan) {
  DT_CHECK_ARG(module != nullptr, "parallelize_module: the module is null");
  check_mesh(mesh);
  auto modules = module->named_modules();
  for (const auto& [pattern, style] : plan) {
    DT_CHECK_ARG(style != nullptr, "parallelize_module: the style for '", pattern, "' is null");
    bool any = false;
    for (auto& [fqn, m] : modules)
      if (!fqn.empty() && fqn_matches(pattern, fqn)) {
        style->apply(*m, fqn, mesh);
        any = true;
      }
    if (!any) {
      std::string names;
      for (size_t i = 1; i < modules.size() && i < 12; ++i) names += (i > 1 ? ", " : "") + modules[i].first;
      DT_THROW(InvalidArgument, "parallelize_module: the plan entry '", pattern, "' (", style->name(),
               ") names no module of this ", module->type_name(), " (its modules include: ", names, ")");
    }
  }
}

void parallelize_module(const ModulePtr& module, const DeviceMesh& mesh, const StylePtr& style) {
  DT_CHECK_ARG(module != nullptr && style != nullptr, "parallelize_module: null module or style");
  check_mesh(mesh);
  style->apply(*module, module->type_name(), mesh);
}

}  // namespace dt::nn
