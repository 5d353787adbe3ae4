// softmax / log_softmax, layer_norm / rms_norm, embedding and cross_entropy against the kernels on full tensors,
// for every combination of placements on [2], [3] and [2, 2].
#include <gtest/gtest.h>

#include "kernels/ops/embedding.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/norm.h"
#include "kernels/ops/softmax.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;
using op_test::InputGen;

TEST(DTensorOpsNN, SoftmaxEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 4}}) {
        for (int64_t dim : {0, -1}) {
          for (bool log : {false, true}) {
            op_test::run_matrix(
                std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim), mesh,
                {InputGen(shape, DType::f32, -3, 3, {ReduceOp::kSum})},
                [&](const std::vector<DTensor>& x) {
                  return std::vector<DTensor>{log ? log_softmax(x[0], dim) : softmax(x[0], dim)};
                },
                [&](const std::vector<Tensor>& x) {
                  return std::vector<Tensor>{log ? kernels::log_softmax(x[0], dim) : kernels::softmax(x[0], dim)};
                },
                false, failures);
          }
        }
      }
    });
  }
  failures.report(700);
}

TEST(DTensorOpsNN, NormsEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      const Shape x = mesh.ndim() == 1 ? Shape{3, 5, 6} : Shape{3, 2, 5};
      for (size_t k : {1, 2}) {
        const Shape ns(x.end() - int64_t(k), x.end());
        const std::vector<ShardingSpec> rep{ShardingSpec::replicated(mesh.ndim())};
        InputGen w(ns, DType::f32, 0.5, 1.5), b(ns, DType::f32, -1, 1);
        if (k == 2) w.fixed_specs = b.fixed_specs = rep;  // weights are replicated in practice; k=1 tries all
        op_test::run_matrix(
            "layer_norm k=" + std::to_string(k), mesh, {InputGen(x, DType::f32, -2, 2, {ReduceOp::kSum}), w, b},
            [&](const std::vector<DTensor>& in) {
              DLayerNormResult r = layer_norm_with_stats(in[0], ns, in[1], in[2]);
              return std::vector<DTensor>{r.out, r.mean, r.rstd};
            },
            [&](const std::vector<Tensor>& in) {
              kernels::LayerNormResult r = kernels::layer_norm(in[0], ns, in[1], in[2]);
              return std::vector<Tensor>{r.out, r.mean, r.rstd};
            },
            false, failures);
        op_test::run_matrix(
            "rms_norm k=" + std::to_string(k), mesh, {InputGen(x, DType::f32, -2, 2, {ReduceOp::kMax}), w},
            [&](const std::vector<DTensor>& in) {
              DRmsNormResult r = rms_norm_with_stats(in[0], ns, in[1]);
              return std::vector<DTensor>{r.out, r.rstd};
            },
            [&](const std::vector<Tensor>& in) {
              kernels::RmsNormResult r = kernels::rms_norm(in[0], ns, in[1]);
              return std::vector<Tensor>{r.out, r.rstd};
            },
            false, failures);
      }
    });
  }
  failures.report(3000);
}

TEST(DTensorOpsNN, EmbeddingEveryPlacement) {
  Failures failures;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      // 7 rows: uneven over 2, 3 and 4 shards; on 2x2 S(0),S(0) gives a rank an empty block of rows.
      for (DType id_dtype : {DType::i64, DType::i32}) {
        InputGen ids({3, 4}, id_dtype, 0, 7);
        InputGen weight({7, 5}, DType::f32, -2, 2, {ReduceOp::kSum, ReduceOp::kMax});
        op_test::run_matrix(
            std::string("embedding ids ") + dtype_name(id_dtype), mesh, {ids, weight},
            [](const std::vector<DTensor>& x) { return std::vector<DTensor>{embedding(x[0], x[1])}; },
            [](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::embedding(x[1], x[0])}; }, true,
            failures, "embedding");
      }
    });
  }
  failures.report(1900);
}

TEST(DTensorOpsNN, EmbeddingRejectsOutOfRangeIdsWhenRowSharded) {
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor ids = distribute_tensor(Tensor::from_data<int64_t>({0, 3, 7}, {3}), mesh, {Replicate{}});
    DTensor w = distribute_tensor(Tensor::ones({7, 2}), mesh, {Shard{0}});
    try {
      embedding(ids, w);
      ADD_FAILURE() << "expected an error";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("outside [0, 7)"), std::string::npos) << e.what();
    }
  });
}

TEST(DTensorOpsNN, CrossEntropyEveryPlacement) {
  Failures failures;
  using kernels::LossReduction;
  for (const auto& mesh_shape : op_test::standard_meshes()) {
    op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      std::vector<std::pair<Shape, Shape>> shapes{{{6, 7}, {6}}};
      if (mesh.ndim() == 1) shapes.push_back({{2, 3, 5}, {2, 3}});
      for (const auto& [ls, ts] : shapes) {
        for (LossReduction red : {LossReduction::kNone, LossReduction::kSum, LossReduction::kMean}) {
          // Targets in [-1, C): -1 is the ignore index, so some rows are ignored.
          InputGen logits(ls, DType::f32, -3, 3, {ReduceOp::kSum});
          InputGen targets(ts, DType::i64, -1, double(ls.back()));
          op_test::run_matrix(
              "cross_entropy reduction " + std::to_string(int(red)), mesh, {logits, targets},
              [red](const std::vector<DTensor>& x) { return std::vector<DTensor>{cross_entropy(x[0], x[1], -1, red)}; },
              [red](const std::vector<Tensor>& x) {
                return std::vector<Tensor>{kernels::cross_entropy(x[0], x[1], -1, red).loss};
              },
              false, failures, "cross_entropy",
              ops::OpParams().set("ignore_index", int64_t(-1)).set("reduction", int64_t(red)));
        }
      }
    });
  }
  failures.report(1100);
}

}  // namespace
}  // namespace dt
