// Makes checkpoints and safetensors exports of sharded DTensors (2x2 thread mesh) for the tests of `dtckpt`
// (tests/tools/test_dtckpt.py) and of the Python ecosystem (tests/python/test_safetensors_export.py), with a
// reference computed from the full tensors in this one process, and imports files written by Python.
//
//   checkpoint_helper save DIR REF       a checkpoint of every dtype in DIR (pages of 256 bytes)
//   checkpoint_helper steps ROOT         checkpoints ROOT/step-5, step-20, step-10 ("step" metadata)
//   checkpoint_helper export DIR REF     DIR/model.safetensors and DIR/hf/model.safetensors.index.json (shards of at
//                                        most 400 bytes) from the same tensors, and DIR/no_bf16.safetensors (all but
//                                        the bf16 ones)
//   checkpoint_helper import PATH REF    imports PATH (a .safetensors file or an HF index) into several layouts and
//                                        compares every full tensor with the reference bit for bit; exit 1 if not
//
// A reference is REF.json, {"tensors": [{"name", "dtype" (safetensors name: "F32", "BF16", ...), "shape", "spec",
// "offset", "nbytes"}], "metadata": {...}}, and REF.bin, the tensors' row-major bytes at their offsets.
#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/safetensors.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace {

namespace json = boost::json;
using namespace dt;
using namespace dt::checkpoint;

const std::vector<int64_t> kMesh{2, 2};

struct Case {
  std::string name;
  DType dtype;
  Shape shape;
  std::string spec;  // on the 2x2 mesh
};

// Every dtype; uneven shards (7 over 2 then 2), empty ones (3 elements over 4 ranks), nested orders, a replicated
// tensor, a 0-d one and one with no elements.
const std::vector<Case>& cases() {
  static const std::vector<Case> c{
      {"model.embed", DType::f32, {13, 6}, "S(0)[1],S(0)[0]"},
      {"model.w", DType::bf16, {7, 5}, "S(1),S(0)"},
      {"model.b", DType::f16, {9}, "R,S(0)"},
      {"stats.var", DType::f64, {5, 3, 2}, "S(2),S(1)"},
      {"ids", DType::i64, {11}, "S(0),S(0)"},
      {"counts", DType::i32, {3, 4}, "S(0),R"},
      {"codes", DType::i8, {6, 7}, "R,R"},
      {"pixels", DType::u8, {17}, "S(0)[1],S(0)[0]"},
      {"mask", DType::b8, {5, 2}, "S(1),S(0)"},
      {"tiny", DType::f32, {3}, "S(0),S(0)"},
      {"scalar", DType::f64, {}, "R,R"},
      {"nothing", DType::f32, {0, 4}, "S(0),R"},
  };
  return c;
}

Tensor random_full(const Case& c, uint64_t seed) {
  if (c.dtype == DType::b8) return Tensor::rand(c.shape, seed, DType::i64, 0, 2).to(DType::b8);
  if (!is_floating(c.dtype)) return Tensor::rand(c.shape, seed, c.dtype, -100, 100);
  return Tensor::randn(c.shape, seed, c.dtype);
}

std::vector<Tensor> full_tensors() {
  std::vector<Tensor> out;
  for (size_t i = 0; i < cases().size(); ++i) out.push_back(random_full(cases()[i], 1000 + i));
  return out;
}

TensorList distribute(const std::vector<Tensor>& fulls, const DeviceMesh& mesh) {
  TensorList list;
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    const ShardingSpec spec = ShardingSpec::parse(c.spec, int64_t(c.shape.size()));
    list.push_back({c.name, distribute_tensor(fulls[i], mesh, spec.placements(), spec.shard_order(), std::nullopt)});
  }
  return list;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  DT_CHECK_ARG(f.good(), "cannot write '", path, "'");
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DT_CHECK_ARG(f.good(), "cannot read '", path, "'");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

json::array ints(const Shape& s) {
  json::array a;
  for (int64_t x : s) a.push_back(x);
  return a;
}

// REF.json and REF.bin from the full tensors (computed here, not read back from any file).
void write_reference(const std::string& ref, const std::vector<Tensor>& fulls, const json::object& metadata) {
  json::array tensors;
  std::string bin;
  for (size_t i = 0; i < cases().size(); ++i) {
    const Case& c = cases()[i];
    const Tensor t = fulls[i].contiguous();
    tensors.push_back(json::object{{"name", c.name},
                                   {"dtype", safetensors_dtype_name(c.dtype)},
                                   {"shape", ints(c.shape)},
                                   {"spec", ShardingSpec::parse(c.spec, int64_t(c.shape.size())).to_string()},
                                   {"offset", bin.size()},
                                   {"nbytes", t.nbytes()}});
    bin.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  write_file(ref + ".json", json::serialize(json::object{{"tensors", tensors}, {"metadata", metadata}}) + "\n");
  write_file(ref + ".bin", bin);
}

int save_mode(const std::string& dir, const std::string& ref) {
  const std::vector<Tensor> fulls = full_tensors();
  const Metadata meta{{"step", int64_t(100)}, {"lr", 0.25}, {"run", std::string("tiny")}, {"final", true}};
  op_test::on_mesh(kMesh,
                   [&](const DeviceMesh& mesh) { save(dir, distribute(fulls, mesh), meta, {.page_bytes = 256}); });
  write_reference(ref, fulls, json::object{{"step", 100}, {"lr", 0.25}, {"run", "tiny"}, {"final", true}});
  std::printf("saved %zu tensors to %s\n", fulls.size(), dir.c_str());
  return 0;
}

int steps_mode(const std::string& root) {
  const Tensor t = Tensor::randn({6, 3}, 7);
  op_test::on_mesh(kMesh, [&](const DeviceMesh& mesh) {
    const DTensor d = distribute_tensor(t, mesh, {Shard{0}, Replicate{}}, {}, std::nullopt);
    for (int64_t step : {5, 20, 10}) save(root + "/step-" + std::to_string(step), {{"t", d}}, {{"step", step}});
  });
  std::printf("saved steps 5, 20, 10 under %s\n", root.c_str());
  return 0;
}

int export_mode(const std::string& dir, const std::string& ref) {
  const std::vector<Tensor> fulls = full_tensors();
  op_test::on_mesh(kMesh, [&](const DeviceMesh& mesh) {
    const TensorList list = distribute(fulls, mesh);
    export_safetensors(dir + "/model.safetensors", list);
    export_safetensors(dir + "/hf/model.safetensors.index.json", list, {.max_shard_bytes = 400});
    // NumPy has no bfloat16: safetensors.numpy.load_file reads a file only when it has no BF16 tensor.
    TensorList no_bf16;
    for (const auto& [name, t] : list)
      if (t.dtype() != DType::bf16) no_bf16.push_back({name, t});
    export_safetensors(dir + "/no_bf16.safetensors", no_bf16);
  });
  write_reference(ref, fulls, json::object{{"format", "pt"}});
  std::printf("exported %zu tensors to %s\n", fulls.size(), dir.c_str());
  return 0;
}

Shape shape_of(const json::value& v) {
  Shape s;
  for (const json::value& x : v.as_array()) s.push_back(x.to_number<int64_t>());
  return s;
}

// Target layouts on the 2x2 mesh (and on 3 ranks): sharded along the first dim, the last, nested, replicated.
std::vector<std::string> target_specs(size_t ndim, size_t mesh_ndim) {
  if (ndim == 0) return mesh_ndim == 1 ? std::vector<std::string>{"R"} : std::vector<std::string>{"R,R"};
  const std::string last = "S(" + std::to_string(ndim - 1) + ")";
  if (mesh_ndim == 1) return {"S(0)", last, "R"};
  return {"S(0),S(0)", "S(0)[1],S(0)[0]", last + ",S(0)", "R," + last, "R,R"};
}

int import_mode(const std::string& path, const std::string& ref) {
  const json::object r = json::parse(read_file(ref + ".json")).as_object();
  const std::string bin = read_file(ref + ".bin");
  struct Want {
    std::string name;
    DType dtype;
    Shape shape;
    std::string bytes;
  };
  std::vector<Want> wants;
  for (const json::value& v : r.at("tensors").as_array()) {
    const json::object& o = v.as_object();
    const auto dtype = dtype_from_safetensors(std::string(o.at("dtype").as_string()));
    DT_CHECK_ARG(dtype.has_value(), "reference: unknown dtype ", json::serialize(o.at("dtype")));
    const uint64_t off = o.at("offset").to_number<uint64_t>(), n = o.at("nbytes").to_number<uint64_t>();
    DT_CHECK_ARG(off + n <= bin.size(), "reference: tensor ", json::serialize(o.at("name")), " runs past ", ref,
                 ".bin");
    wants.push_back({std::string(o.at("name").as_string()), *dtype, shape_of(o.at("shape")), bin.substr(off, n)});
  }
  std::mutex mu;
  std::vector<std::string> failures;
  int64_t checked = 0;
  for (const std::vector<int64_t>& mesh_shape : {kMesh, std::vector<int64_t>{3}}) {
    const size_t layouts = target_specs(1, mesh_shape.size()).size();
    for (size_t layout = 0; layout < layouts; ++layout) {
      op_test::on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
        TensorList list;
        for (const Want& w : wants) {
          const std::vector<std::string> specs = target_specs(w.shape.size(), mesh_shape.size());
          const ShardingSpec spec = ShardingSpec::parse(specs[layout % specs.size()], int64_t(w.shape.size()));
          list.push_back({w.name, distribute_tensor(Tensor::zeros(w.shape, w.dtype), mesh, spec.placements(),
                                                    spec.shard_order(), std::nullopt)});
        }
        import_safetensors(path, list);
        for (size_t i = 0; i < wants.size(); ++i) {
          const Tensor got = list[i].second.full_tensor().contiguous();
          const bool same = got.nbytes() == wants[i].bytes.size() &&
                            std::memcmp(got.data_ptr(), wants[i].bytes.data(), got.nbytes()) == 0;
          if (mesh.global_rank() != 0) continue;
          std::lock_guard<std::mutex> lock(mu);
          ++checked;
          if (!same)
            failures.push_back(str_cat(wants[i].name, " imported as ", list[i].second.spec().to_string(), " on mesh ",
                                       shape_str(mesh_shape), " differs from the reference"));
        }
      });
    }
  }
  for (const std::string& f : failures) std::printf("FAIL: %s\n", f.c_str());
  if (!failures.empty()) return 1;
  std::printf("imported %zu tensors from %s into %lld layouts each: all equal to the reference\n", wants.size(),
              path.c_str(), static_cast<long long>(checked / int64_t(std::max<size_t>(wants.size(), 1))));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "save" && argc == 4) return save_mode(argv[2], argv[3]);
    if (mode == "steps" && argc == 3) return steps_mode(argv[2]);
    if (mode == "export" && argc == 4) return export_mode(argv[2], argv[3]);
    if (mode == "import" && argc == 4) return import_mode(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_helper %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: checkpoint_helper save DIR REF | steps ROOT | export DIR REF | import PATH REF\n");
  return 2;
}
