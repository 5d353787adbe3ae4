#include "tests/dtensor/ops/op_test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>

#include "placement/layout.h"

namespace dt::op_test {

void Failures::add(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  list_.push_back(what);
}
std::vector<std::string> Failures::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_;
}
size_t Failures::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return list_.size();
}
void Failures::report(int64_t min_cases, size_t max_shown) const {
  std::printf("  %lld cases checked (all ranks)\n", static_cast<long long>(cases()));
  EXPECT_GE(cases(), min_cases) << "cases checked";
  std::vector<std::string> l = list();
  for (size_t i = 0; i < l.size() && i < max_shown; ++i) ADD_FAILURE() << l[i];
  EXPECT_EQ(l.size(), 0u) << "failures in total";
}

void on_mesh(const std::vector<int64_t>& mesh_shape, const std::function<void(const DeviceMesh&)>& fn) {
  int64_t n = 1;
  for (int64_t s : mesh_shape) n *= s;
  run_threads(int(n), [&](CommunicatorPtr world) {
    DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), mesh_shape);
    fn(mesh);
  });
}

std::vector<ShardingSpec> specs_for(int64_t ndim, int64_t mesh_ndim, const std::vector<ReduceOp>& partial_ops,
                                    bool nested_orders) {
  std::vector<Placement> options{Replicate{}};
  for (int64_t d = 0; d < ndim; ++d) options.push_back(Shard{d});
  for (ReduceOp op : partial_ops) options.push_back(Partial{op});
  std::vector<ShardingSpec> out;
  std::vector<size_t> idx(static_cast<size_t>(mesh_ndim), 0);
  while (true) {
    std::vector<Placement> p;
    for (size_t i : idx) p.push_back(options[i]);
    ShardingSpec spec(p);
    if (!spec.has_mixed_partial()) {
      out.push_back(spec);
      if (nested_orders && mesh_ndim == 2 && p[0] == p[1] && is_shard(p[0]))
        out.emplace_back(p, ShardOrder{{std::get<Shard>(p[0]).dim, {1, 0}}});
    }
    int64_t m = mesh_ndim - 1;
    while (m >= 0 && ++idx[size_t(m)] == options.size()) idx[size_t(m--)] = 0;
    if (m < 0) break;
  }
  return out;
}

DTensor random_dtensor(const InputGen& gen, const DeviceMesh& mesh, const ShardingSpec& spec, uint64_t seed) {
  // The partial coordinate selects the contribution; everything else is one global tensor.
  uint64_t s = seed * 7919;
  for (int64_t m = 0; m < spec.mesh_ndim(); ++m)
    if (is_partial(spec[m])) s = s * 31 + uint64_t(mesh.coordinate()[size_t(m)]) + 1;
  Tensor full = Tensor::rand(gen.shape, s, gen.dtype, gen.lo, gen.hi);
  std::vector<IndexRange> ranges = local_ranges(gen.shape, mesh.shape(), spec, mesh.coordinate());
  Tensor v = full;
  for (size_t d = 0; d < ranges.size(); ++d) v = v.narrow(int64_t(d), ranges[d].begin, ranges[d].size());
  return DTensor::from_local_unchecked(v.contiguous(), mesh, spec, gen.shape);
}

void tolerance(DType dtype, double* rtol, double* atol) {
  switch (dtype) {
    case DType::f64:
      *rtol = 1e-10, *atol = 1e-12;
      break;
    case DType::bf16:
      *rtol = 3e-2, *atol = 1.25e-1;  // sums of rounded bf16 partials (8-bit mantissa)
      break;
    case DType::f16:
      *rtol = 5e-3, *atol = 1e-2;
      break;
    default:
      *rtol = 1e-4, *atol = 1e-5;
  }
}

bool compare(const Tensor& got, const Tensor& want, bool exact, std::string* why, double scale) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype()) {
    *why = "got " + shape_str(got.shape()) + " " + dtype_name(got.dtype()) + ", want " + shape_str(want.shape()) + " " +
           dtype_name(want.dtype());
    return false;
  }
  bool ok;
  if (exact || !is_floating(want.dtype())) {
    ok = equal(got, want);
  } else {
    double rtol, atol;
    tolerance(want.dtype(), &rtol, &atol);
    ok = allclose(got, want, rtol, atol * scale);
  }
  if (!ok) {
    std::ostringstream os;
    os << "max |diff| " << max_abs_diff(got, want) << "\n got  " << got.to_string(6) << "\n want " << want.to_string(6);
    *why = os.str();
  }
  return ok;
}

MatrixStats run_matrix(const std::string& label, const DeviceMesh& mesh, const std::vector<InputGen>& inputs,
                       const DistFn& dist, const RefFn& ref, bool exact, Failures& failures, const std::string& op_name,
                       const ops::OpParams& params, uint64_t seed) {
  MatrixStats stats;
  std::vector<std::vector<ShardingSpec>> specs;
  for (const InputGen& g : inputs) {
    if (!g.fixed_specs.empty()) {
      specs.push_back(g.fixed_specs);
      continue;
    }
    std::vector<ShardingSpec> s = specs_for(g.shard ? int64_t(g.shape.size()) : 0, mesh.ndim(), g.partial_ops);
    specs.push_back(s);
  }
  std::vector<size_t> idx(inputs.size(), 0);
  while (true) {
    std::vector<DTensor> xs;
    std::string what = label + " on mesh " + shape_str(mesh.shape().sizes()) + " inputs";
    // Partial(sum/avg/product) over several mesh dims is reduced in an order that depends on the plan, so even
    // data movement is then only exact up to rounding.
    bool reorderable = false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ShardingSpec& spec = specs[i][idx[i]];
      int64_t n = 0;
      for (const Placement& p : spec.placements())
        if (is_partial(p) && std::get<Partial>(p).op != ReduceOp::kMax && std::get<Partial>(p).op != ReduceOp::kMin)
          ++n;
      reorderable = reorderable || n > 1;
      what += " " + shape_str(inputs[i].shape) + ":" + spec.to_string();
      xs.push_back(random_dtensor(inputs[i], mesh, spec, seed * 1000 + i));
    }
    ++seed;
    try {
      std::vector<Tensor> fulls;
      for (const DTensor& x : xs) fulls.push_back(x.full_tensor());
      std::vector<Tensor> want = ref(fulls);
      if (!op_name.empty()) {
        ops::Propagation p = ops::explain(op_name, xs, params);
        what += " chose " + p.chosen.to_string();
        (p.direct() ? stats.direct : stats.redistributed)++;
      }
      std::vector<DTensor> got = dist(xs);
      if (got.size() != want.size()) {
        failures.add(what + ": " + std::to_string(got.size()) + " outputs, want " + std::to_string(want.size()));
      }
      for (size_t k = 0; k < got.size() && k < want.size(); ++k) {
        std::string why;
        if (got[k].shape() != want[k].shape()) {
          failures.add(what + ": output " + std::to_string(k) + " global shape " + shape_str(got[k].shape()) +
                       ", want " + shape_str(want[k].shape()));
          continue;
        }
        Tensor full = got[k].full_tensor();
        if (!compare(full, want[k], exact && !reorderable, &why))
          failures.add(what + ": output " + std::to_string(k) + " " + why);
      }
      ++stats.cases;
      failures.add_cases(1);
    } catch (const std::exception& e) {
      failures.add(what + ": threw " + e.what());
    }
    size_t i = 0;
    while (i < idx.size() && ++idx[i] == specs[i].size()) idx[i++] = 0;
    if (i == idx.size()) break;
  }
  return stats;
}

}  // namespace dt::op_test
