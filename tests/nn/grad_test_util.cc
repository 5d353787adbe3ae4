#include "tests/nn/grad_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/splitmix.h"
#include "nn/autograd.h"
#include "placement/layout.h"

namespace dt::nn_test {

using op_test::Failures;

Tensor step_tokens(int64_t batch, int64_t seq, int64_t vocab, int64_t step) {
  Tensor t = Tensor::empty({batch, seq + 1}, DType::i64);
  int64_t* d = t.data<int64_t>();
  for (int64_t r = 0; r < batch; ++r) {
    d[r * (seq + 1)] = int64_t(splitmix64(uint64_t(step * 1000 + r)) % uint64_t(vocab));
    for (int64_t i = 1; i <= seq; ++i) d[r * (seq + 1) + i] = (5 * d[r * (seq + 1) + i - 1] + 3) % vocab;
  }
  return t;
}

nn::GptConfig uneven_gpt_config() {
  nn::GptConfig c;
  c.vocab = 37;
  c.dim = 32;
  c.layers = 2;
  c.heads = 4;
  c.hidden = 40;
  return c;
}

DTensor replicate_on(const Tensor& full, const DeviceMesh& mesh) {
  std::vector<Placement> p(size_t(mesh.ndim()), Replicate{});
  // A copy: ranks of the thread backend share the process, and optimizers update their blocks in place.
  return DTensor::from_local_unchecked(full.clone(), mesh, ShardingSpec(p), full.shape());
}

std::vector<DeviceMesh> self_meshes(const DeviceMesh& mesh) {
  std::vector<DeviceMesh> out;
  const int64_t n = mesh.world()->size();
  for (int64_t r = 0; r < n; ++r) out.push_back(DeviceMesh::create(mesh.world(), Device::cpu(), {1}, {}, {r}));
  return out;
}

namespace {

Tensor input_value(const GradInput& in, uint64_t seed) {
  return Tensor::rand(in.shape, seed, DType::f64, in.lo, in.hi);
}

// loss = sum(out * w), w random of out's shape (seeded), laid out like out.
Variable loss_of(const Variable& out) {
  Tensor w = Tensor::rand(out.shape(), 4242, DType::f64, -1, 1);
  std::vector<Placement> p = out.placements();
  for (Placement& x : p)
    if (is_partial(x)) x = Replicate{};
  ShardingSpec spec(p, out.spec().shard_order());
  // w takes out's shardings (Replicate where out is Partial) so that the product needs no communication.
  std::vector<IndexRange> rw = out.mesh().is_member()
                                   ? local_ranges(out.shape(), out.mesh().shape(), spec, out.mesh().coordinate())
                                   : std::vector<IndexRange>{};
  Tensor wl = w;
  for (size_t d = 0; d < rw.size(); ++d) wl = wl.narrow(int64_t(d), rw[d].begin, rw[d].size());
  Variable wv(DTensor::from_local_unchecked(wl.contiguous(), out.mesh(), spec, out.shape()));
  return nn::sum(nn::mul(nn::to(out, DType::f64), wv));
}

double scalar(const Variable& v) { return v.full_tensor().to(DType::f64).data<double>()[0]; }

}  // namespace

int64_t check_finite_differences(const std::string& name, const std::vector<GradInput>& inputs, const GradFn& fn,
                                 Failures& failures, double tol) {
  int64_t checked = 0;
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    std::vector<Tensor> values;
    for (size_t i = 0; i < inputs.size(); ++i) values.push_back(input_value(inputs[i], 100 + i));
    auto run = [&](bool grad) {
      std::vector<Variable> vars;
      for (size_t i = 0; i < inputs.size(); ++i)
        vars.emplace_back(replicate_on(values[i], mesh), grad && inputs[i].differentiable);
      Variable loss = loss_of(fn(vars));
      if (grad) loss.backward();
      return std::make_pair(scalar(loss), vars);
    };
    auto [loss0, vars] = run(true);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].differentiable) continue;
      const DTensor& g = vars[i].grad();
      if (!g.defined()) {
        failures.add(name + ": input " + std::to_string(i) + " got no gradient");
        continue;
      }
      Tensor analytic = g.full_tensor().to(DType::f64).contiguous();
      const double h = 1e-6;
      for (int64_t j = 0; j < values[i].numel(); ++j) {
        double* x = values[i].data<double>() + j;
        const double x0 = *x;
        *x = x0 + h;
        const double up = run(false).first;
        *x = x0 - h;
        const double down = run(false).first;
        *x = x0;
        const double numeric = (up - down) / (2 * h);
        const double a = analytic.data<double>()[j];
        ++checked;
        if (!(std::abs(a - numeric) <= tol + 1e-5 * std::abs(numeric))) {
          std::ostringstream os;
          os << name << ": d loss / d input " << i << " element " << j << ": autograd " << a << ", finite differences "
             << numeric;
          failures.add(os.str());
        }
      }
    }
    (void)loss0;
  });
  failures.add_cases(checked);
  return checked;
}

void check_distributed(const std::string& name, const std::vector<GradInput>& inputs, const GradFn& fn,
                       Failures& failures, std::vector<std::vector<int64_t>> meshes) {
  if (meshes.empty()) meshes = op_test::standard_meshes();
  for (const auto& mesh_shape : meshes) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      const DeviceMesh self = self_meshes(mesh)[size_t(mesh.global_rank())];
      std::vector<std::vector<ShardingSpec>> specs;
      size_t rounds = 1;
      for (const GradInput& in : inputs) {
        std::vector<ShardingSpec> s =
            in.shard
                ? op_test::specs_for(int64_t(in.shape.size()), mesh.ndim(), {})
                : std::vector<ShardingSpec>{ShardingSpec(std::vector<Placement>(size_t(mesh.ndim()), Replicate{}))};
        rounds = std::max(rounds, s.size());
        specs.push_back(std::move(s));
      }
      // Reference: one rank, full tensors.
      std::vector<Tensor> values;
      for (size_t i = 0; i < inputs.size(); ++i) values.push_back(input_value(inputs[i], 300 + i));
      std::vector<Variable> ref_vars;
      for (size_t i = 0; i < inputs.size(); ++i)
        ref_vars.emplace_back(replicate_on(values[i], self), inputs[i].differentiable);
      Variable ref_loss = loss_of(fn(ref_vars));
      ref_loss.backward();
      const double want_loss = scalar(ref_loss);
      for (size_t k = 0; k < rounds; ++k) {
        std::vector<Variable> vars;
        std::string label = name + " on " + mesh.to_string() + " with";
        for (size_t i = 0; i < inputs.size(); ++i) {
          const ShardingSpec& spec = specs[i][(k + i) % specs[i].size()];
          std::vector<IndexRange> r = local_ranges(inputs[i].shape, mesh.shape(), spec, mesh.coordinate());
          Tensor local = values[i];
          for (size_t d = 0; d < r.size(); ++d) local = local.narrow(int64_t(d), r[d].begin, r[d].size());
          vars.emplace_back(DTensor::from_local_unchecked(local.contiguous(), mesh, spec, inputs[i].shape),
                            inputs[i].differentiable);
          label += " " + spec.to_string();
        }
        try {
          Variable loss = loss_of(fn(vars));
          loss.backward();
          const double got = scalar(loss);
          if (!(std::abs(got - want_loss) <= 1e-9 + 1e-9 * std::abs(want_loss)))
            failures.add(label + ": loss " + std::to_string(got) + ", one rank " + std::to_string(want_loss));
          for (size_t i = 0; i < inputs.size(); ++i) {
            if (!inputs[i].differentiable) continue;
            const DTensor& g = vars[i].grad();
            if (!g.defined()) {
              failures.add(label + ": input " + std::to_string(i) + " got no gradient");
              continue;
            }
            if (!(g.spec() == vars[i].spec()))
              failures.add(label + ": gradient of input " + std::to_string(i) + " is " + g.spec().to_string() +
                           ", the input is " + vars[i].spec().to_string());
            std::string why;
            Tensor want = ref_vars[i].grad().full_tensor();
            if (!op_test::compare(g.full_tensor(), want, false, &why))
              failures.add(label + ": gradient of input " + std::to_string(i) + ": " + why);
          }
        } catch (const std::exception& e) {
          failures.add(label + ": threw " + e.what());
        }
        failures.add_cases(1);
      }
    });
  }
}

void check_op(const std::string& name, const std::vector<GradInput>& inputs, const GradFn& fn, Failures& failures) {
  check_finite_differences(name, inputs, fn, failures);
  check_distributed(name, inputs, fn, failures);
}

}  // namespace dt::nn_test
