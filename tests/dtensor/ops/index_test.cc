// expand, stack, slice, index_select, gather and the backward ops, for every placement combination on the standard
// meshes, against references computed here with plain loops on full tensors (uneven and empty shards included).
#include <gtest/gtest.h>

#include "kernels/ops/shape_ops.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt {
namespace {

using op_test::Failures;
using op_test::InputGen;

const std::vector<ReduceOp> kSum{ReduceOp::kSum};

// Element (i, j) of a 2-d tensor, in double.
struct Mat {
  explicit Mat(const Tensor& t) : rows(t.size(0)), cols(t.size(1)), v(t.to_vector()) {}
  Mat(int64_t r, int64_t c) : rows(r), cols(c), v(size_t(r * c), 0.0) {}
  double& at(int64_t i, int64_t j) { return v[size_t(i * cols + j)]; }
  Tensor tensor(DType dtype) const { return Tensor::from_vector(v, {rows, cols}, dtype); }
  int64_t rows, cols;
  std::vector<double> v;
};

template <typename F>
void for_meshes(F&& f) {
  for (const auto& mesh_shape : op_test::standard_meshes()) op_test::on_mesh(mesh_shape, f);
}

TEST(DTensorOpsIndex, ExpandAndStack) {
  Failures failures;
  for_meshes([&](const DeviceMesh& mesh) {
    const std::vector<std::pair<Shape, Shape>> cases{
        {{3, 1}, {2, 3, 5}}, {{3, 1}, {-1, 4}}, {{1}, {0}}, {{5, 3}, {5, 3}}};
    for (const auto& [from, to] : cases) {
      op_test::run_matrix(
          "expand " + shape_str(from) + " -> " + shape_str(to), mesh, {InputGen(from, DType::f32, -2, 2, kSum)},
          [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{expand(x[0], to)}; },
          [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].expand(to).contiguous()}; }, true,
          failures);
    }
    for (int64_t dim : {0, 1, -1}) {
      op_test::run_matrix(
          "stack dim " + std::to_string(dim), mesh, {InputGen({5, 3}, DType::f32, -2, 2, kSum), InputGen({5, 3})},
          [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{stack(x, dim)}; },
          [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{kernels::stack(x, dim)}; }, true, failures);
    }
  });
  failures.report(300);
}

TEST(DTensorOpsIndex, SliceAndBackward) {
  Failures failures;
  struct Case {
    int64_t dim, start, end, step;
  };
  const std::vector<Case> cases{{0, 1, 6, 2}, {0, -3, 100, 1}, {1, 0, 4, 3}, {0, 5, 2, 1}};
  for_meshes([&](const DeviceMesh& mesh) {
    for (const Case& c : cases) {
      // The positions taken along dim (Python bounds).
      const int64_t size = c.dim == 0 ? 7 : 4;
      int64_t b = c.start < 0 ? c.start + size : c.start, e = std::min(c.end, size);
      std::vector<int64_t> taken;
      for (int64_t i = b; i < e; i += c.step) taken.push_back(i);
      const int64_t n = int64_t(taken.size());
      const std::string label = "slice dim " + std::to_string(c.dim) + " " + std::to_string(c.start) + ":" +
                                std::to_string(c.end) + ":" + std::to_string(c.step);
      op_test::run_matrix(
          label, mesh, {InputGen({7, 4}, DType::f32, -2, 2, kSum)},
          [&](const std::vector<DTensor>& x) {
            return std::vector<DTensor>{slice(x[0], c.dim, c.start, c.end, c.step)};
          },
          [&](const std::vector<Tensor>& x) {
            Mat in(x[0]), out(c.dim == 0 ? n : 7, c.dim == 0 ? 4 : n);
            for (int64_t i = 0; i < out.rows; ++i)
              for (int64_t j = 0; j < out.cols; ++j)
                out.at(i, j) = c.dim == 0 ? in.at(taken[size_t(i)], j) : in.at(i, taken[size_t(j)]);
            return std::vector<Tensor>{out.tensor(DType::f32)};
          },
          true, failures);
      const Shape gshape = c.dim == 0 ? Shape{n, 4} : Shape{7, n};
      op_test::run_matrix(
          label + " backward", mesh, {InputGen(gshape, DType::f32, -2, 2, kSum)},
          [&](const std::vector<DTensor>& g) {
            return std::vector<DTensor>{slice_backward(g[0], {7, 4}, c.dim, c.start, c.end, c.step)};
          },
          [&](const std::vector<Tensor>& g) {
            Mat in(g[0]), out(7, 4);
            for (int64_t i = 0; i < in.rows; ++i)
              for (int64_t j = 0; j < in.cols; ++j)
                (c.dim == 0 ? out.at(taken[size_t(i)], j) : out.at(i, taken[size_t(j)])) = in.at(i, j);
            return std::vector<Tensor>{out.tensor(DType::f32)};
          },
          true, failures);
    }
  });
  failures.report(200);
}

TEST(DTensorOpsIndex, IndexSelectAndBackward) {
  Failures failures;
  for_meshes([&](const DeviceMesh& mesh) {
    for (int64_t dim : {0, 1}) {
      const Shape xs{5, 4};
      const int64_t size = xs[size_t(dim)];
      op_test::run_matrix(
          "index_select dim " + std::to_string(dim), mesh,
          {InputGen(xs, DType::f32, -2, 2, kSum), InputGen({6}, DType::i64, 0, 4)},
          [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{index_select(x[0], dim, x[1])}; },
          [&](const std::vector<Tensor>& x) {
            Mat in(x[0]);
            std::vector<double> idx = x[1].to_vector();
            Mat out(dim == 0 ? 6 : 5, dim == 0 ? 4 : 6);
            for (int64_t i = 0; i < out.rows; ++i)
              for (int64_t j = 0; j < out.cols; ++j)
                out.at(i, j) = dim == 0 ? in.at(int64_t(idx[size_t(i)]), j) : in.at(i, int64_t(idx[size_t(j)]));
            return std::vector<Tensor>{out.tensor(DType::f32)};
          },
          true, failures);
      const Shape gs = dim == 0 ? Shape{6, 4} : Shape{5, 6};
      op_test::run_matrix(
          "index_select_backward dim " + std::to_string(dim), mesh,
          {InputGen(gs, DType::f32, -2, 2, kSum), InputGen({6}, DType::i64, 0, 4)},
          [&](const std::vector<DTensor>& x) {
            return std::vector<DTensor>{index_select_backward(x[0], x[1], dim, size)};
          },
          [&](const std::vector<Tensor>& x) {
            Mat g(x[0]), out(dim == 0 ? size : 5, dim == 0 ? 4 : size);
            std::vector<double> idx = x[1].to_vector();
            for (int64_t i = 0; i < g.rows; ++i)
              for (int64_t j = 0; j < g.cols; ++j)
                (dim == 0 ? out.at(int64_t(idx[size_t(i)]), j) : out.at(i, int64_t(idx[size_t(j)]))) += g.at(i, j);
            return std::vector<Tensor>{out.tensor(DType::f32)};
          },
          false, failures);
    }
  });
  failures.report(300);
}

TEST(DTensorOpsIndex, GatherAndBackward) {
  Failures failures;
  for_meshes([&](const DeviceMesh& mesh) {
    struct Case {
      int64_t dim;
      Shape index;
    };
    for (const Case& c : {Case{0, {3, 4}}, Case{1, {5, 6}}, Case{0, {6, 2}}, Case{1, {0, 3}}}) {
      const Shape xs{5, 4};
      const int64_t dim = c.dim;
      const std::string label = "gather dim " + std::to_string(dim) + " index " + shape_str(c.index);
      op_test::run_matrix(
          label, mesh, {InputGen(xs, DType::f32, -2, 2, kSum), InputGen(c.index, DType::i64, 0, 4)},
          [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{gather(x[0], dim, x[1])}; },
          [&](const std::vector<Tensor>& x) {
            Mat in(x[0]), idx(x[1]), out(c.index[0], c.index[1]);
            for (int64_t i = 0; i < out.rows; ++i)
              for (int64_t j = 0; j < out.cols; ++j) {
                const auto k = int64_t(idx.at(i, j));
                out.at(i, j) = dim == 0 ? in.at(k, j) : in.at(i, k);
              }
            return std::vector<Tensor>{out.tensor(DType::f32)};
          },
          true, failures);
      op_test::run_matrix(
          label + " backward", mesh, {InputGen(c.index, DType::f32, -2, 2, kSum), InputGen(c.index, DType::i64, 0, 4)},
          [&](const std::vector<DTensor>& x) { return std::vector<DTensor>{gather_backward(x[0], x[1], dim, xs)}; },
          [&](const std::vector<Tensor>& x) {
            Mat g(x[0]), idx(x[1]), out(5, 4);
            for (int64_t i = 0; i < g.rows; ++i)
              for (int64_t j = 0; j < g.cols; ++j) {
                const auto k = int64_t(idx.at(i, j));
                (dim == 0 ? out.at(k, j) : out.at(i, k)) += g.at(i, j);
              }
            return std::vector<Tensor>{out.tensor(DType::f32)};
          },
          false, failures);
    }
  });
  failures.report(300);
}

TEST(DTensorOpsIndex, ShardingsPassThrough) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(Tensor::rand({5, 4}, 1), mesh, {Shard{1}}, {}, std::nullopt);
    DTensor idx = distribute_tensor(Tensor::from_data<int64_t>({4, 0, 2}, {3}), mesh, {Replicate{}}, {}, std::nullopt);
    EXPECT_TRUE(index_select(x, 0, idx).placements()[0] == Placement(Shard{1}));
    EXPECT_TRUE(slice(x, 0, 1, 4).placements()[0] == Placement(Shard{1}));
    EXPECT_TRUE(expand(x, {3, 5, 4}).placements()[0] == Placement(Shard{2}));
    DTensor g = distribute_tensor(Tensor::rand({3, 4}, 2), mesh, {Shard{0}}, {}, std::nullopt);
    DTensor gi = distribute_tensor(Tensor::from_data<int64_t>({4, 0, 2}, {3}), mesh, {Shard{0}}, {}, std::nullopt);
    EXPECT_TRUE(
        ops::explain("index_select_backward", {g, gi}, ops::OpParams().set("dim", int64_t(0)).set("size", int64_t(5)))
            .direct());
  });
}

TEST(DTensorOpsIndex, BadArguments) {
  op_test::on_mesh({2}, [](const DeviceMesh& mesh) {
    DTensor x = distribute_tensor(Tensor::rand({5, 4}, 1), mesh, {Shard{0}}, {}, std::nullopt);
    DTensor bad = distribute_tensor(Tensor::from_data<int64_t>({1, 7}, {2}), mesh, {Replicate{}}, {}, std::nullopt);
    DTensor fidx = distribute_tensor(Tensor::rand({2}, 1), mesh, {Replicate{}}, {}, std::nullopt);
    EXPECT_THROW(index_select(x, 0, bad), InvalidArgument);
    EXPECT_THROW(index_select(x, 0, fidx), InvalidArgument);
    EXPECT_THROW(gather(x, 0, bad), InvalidArgument);  // index must have x's ndim
    EXPECT_THROW(expand(x, {5, 3}), InvalidArgument);
    EXPECT_THROW(expand(x, {-1, 5, 4}), InvalidArgument);
    EXPECT_THROW(slice(x, 0, 0, 3, 0), InvalidArgument);
    EXPECT_THROW(stack({x, transpose(x, 0, 1)}), InvalidArgument);
    EXPECT_THROW(slice_backward(x, {5, 4}, 0, 0, 3), InvalidArgument);
  });
}

}  // namespace
}  // namespace dt
