// The nn tests' gradient harness: an op (a function of Variables) is checked
//   1. on one rank in f64 against central finite differences of the loss sum(op(x) * w) (w fixed, random), and
//   2. on meshes [2], [3], [2, 2] for many input placements (uneven and empty shards included): the loss and every
//      input's gradient (full_tensor) against the same op on one rank with the full tensors, and each gradient's
//      placements against its input's.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/models/gpt.h"
#include "nn/ops.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt::nn_test {

using nn::Variable;

struct GradInput {
  Shape shape;
  double lo = -2, hi = 2;
  bool differentiable = true;
  bool shard = true;  // try Shard placements in the distributed check
};

using GradFn = std::function<Variable(const std::vector<Variable>&)>;

// 1. Finite differences (one rank, f64). Returns the number of elements checked.
int64_t check_finite_differences(const std::string& name, const std::vector<GradInput>& inputs, const GradFn& fn,
                                 op_test::Failures& failures, double tol = 1e-6);
// 2. Distributed against one rank; `meshes` default: [2], [3], [2, 2].
void check_distributed(const std::string& name, const std::vector<GradInput>& inputs, const GradFn& fn,
                       op_test::Failures& failures, std::vector<std::vector<int64_t>> meshes = {});
// Both.
void check_op(const std::string& name, const std::vector<GradInput>& inputs, const GradFn& fn,
              op_test::Failures& failures);

// Meshes of one rank, one per rank of mesh's world (collective over the world); element r is rank r's.
std::vector<DeviceMesh> self_meshes(const DeviceMesh& mesh);
// A DTensor replicated on `mesh` holding a copy of `full` (no communication; each call owns its storage).
DTensor replicate_on(const Tensor& full, const DeviceMesh& mesh);

// Tokens of training step `step` ([batch, seq + 1], ids < vocab): rows following t[i+1] = (5 t[i] + 3) mod vocab from
// a seeded start, so that a model can learn them and the loss falls.
Tensor step_tokens(int64_t batch, int64_t seq, int64_t vocab, int64_t step);

// The GPT of the FSDP tests: vocab 37 and hidden 40 split unevenly over 3 and 4 ranks, dim 32 over 3.
nn::GptConfig uneven_gpt_config();

}  // namespace dt::nn_test
