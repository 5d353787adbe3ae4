// Sharded checkpoints (dtensor/checkpoint/): the index math and file formats against brute force, round trips
// between random layouts and world sizes (uneven and empty shards, nested orders, Partial, every dtype) compared bit
// for bit with the tensors saved, async saves, overwrites, strict and non-strict loads, safetensors export and
// import, and damaged, truncated or missing files.
#include "dtensor/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>

#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/plan.h"
#include "dtensor/checkpoint/safetensors.h"
#include "placement/layout.h"
#include "tests/dtensor/ops/op_test_util.h"

namespace dt::checkpoint {
namespace {

// Folders under $TMPDIR, removed when the test program ends.
struct TempDirs {
  std::mutex mu;
  std::vector<std::string> dirs;
  ~TempDirs() {
    for (const std::string& d : dirs) std::filesystem::remove_all(d);
  }
};
TempDirs g_temp_dirs;

std::string temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dt_ckpt_XXXXXX";
  DT_ASSERT(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
  std::lock_guard<std::mutex> lock(g_temp_dirs.mu);
  g_temp_dirs.dirs.push_back(tmpl);
  return tmpl;
}

Tensor random_full(const Shape& shape, DType dtype, uint64_t seed) {
  if (dtype == DType::b8) return Tensor::rand(shape, seed, DType::i64, 0, 2).to(DType::b8);
  if (!is_floating(dtype)) return Tensor::rand(shape, seed, dtype, -100, 100);
  return Tensor::randn(shape, seed, dtype);
}

// ---- index math ----

TEST(CheckpointBox, RunsCoverThePartExactlyOnce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t nd = trial % 4;
    Box whole{Shape(size_t(nd), 0), Shape(size_t(nd))};
    for (auto& s : whole.shape) s = 1 + int64_t(rng() % 6);
    auto random_box = [&]() {
      Box b{Shape(size_t(nd)), Shape(size_t(nd))};
      for (int64_t d = 0; d < nd; ++d) {
        const int64_t lo = int64_t(rng() % uint64_t(whole.shape[size_t(d)]));
        b.offset[size_t(d)] = lo;
        b.shape[size_t(d)] = 1 + int64_t(rng() % uint64_t(whole.shape[size_t(d)] - lo));
      }
      return b;
    };
    const Box src = random_box(), dst = random_box();
    const auto part = intersect(src, dst);
    // Brute force: every element of the whole tensor in both boxes.
    int64_t both = 0;
    for (int64_t i = 0; i < whole.numel(); ++i) {
      int64_t rem = i;
      bool in_src = true, in_dst = true;
      for (int64_t d = nd - 1; d >= 0; --d) {
        const int64_t x = rem % whole.shape[size_t(d)];
        rem /= whole.shape[size_t(d)];
        in_src &= x >= src.offset[size_t(d)] && x < src.offset[size_t(d)] + src.shape[size_t(d)];
        in_dst &= x >= dst.offset[size_t(d)] && x < dst.offset[size_t(d)] + dst.shape[size_t(d)];
      }
      both += in_src && in_dst;
    }
    ASSERT_EQ(part.has_value(), both > 0) << trial;
    if (!part) continue;
    ASSERT_EQ(part->numel(), both);
    // Each run copies the element with the same global index: check by copying global linear indices.
    std::vector<int64_t> src_vals(size_t(src.numel())), dst_vals(size_t(dst.numel()), -1);
    for (int64_t i = 0; i < src.numel(); ++i) {
      int64_t rem = i, g = 0, mul = 1;
      for (int64_t d = nd - 1; d >= 0; --d) {
        g += (src.offset[size_t(d)] + rem % src.shape[size_t(d)]) * mul;
        rem /= src.shape[size_t(d)];
        mul *= whole.shape[size_t(d)];
      }
      src_vals[size_t(i)] = g;
    }
    int64_t copied = 0, last_src = -1;
    for_each_run(*part, src, dst, [&](int64_t s, int64_t d, int64_t len) {
      EXPECT_GT(s, last_src) << "runs in increasing source order";
      last_src = s;
      for (int64_t k = 0; k < len; ++k) dst_vals[size_t(d + k)] = src_vals[size_t(s + k)];
      copied += len;
    });
    EXPECT_EQ(copied, both);
    for (int64_t i = 0; i < dst.numel(); ++i) {
      if (dst_vals[size_t(i)] < 0) continue;
      int64_t rem = i, g = 0, mul = 1;
      for (int64_t d = nd - 1; d >= 0; --d) {
        g += (dst.offset[size_t(d)] + rem % dst.shape[size_t(d)]) * mul;
        rem /= dst.shape[size_t(d)];
        mul *= whole.shape[size_t(d)];
      }
      EXPECT_EQ(dst_vals[size_t(i)], g) << "trial " << trial << " element " << i;
    }
  }
}

// Every rank's block of a tensor laid out as spec on mesh (what prepare gathers).
std::vector<Box> boxes_of(const Shape& shape, const MeshShape& mesh, const ShardingSpec& spec) {
  std::vector<Box> out(size_t(mesh.numel()));
  for (int64_t r = 0; r < mesh.numel(); ++r) {
    const LocalLayout l = local_layout(shape, mesh, spec, mesh.coordinate_of(r));
    out[size_t(r)] = Box{l.offset, l.shape};
  }
  return out;
}

TEST(CheckpointBox, FirstOverlapAgreesWithEveryPair) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t nd = 1 + trial % 3;
    std::vector<Box> boxes(2 + rng() % 12);
    for (Box& b : boxes) {
      b.offset.resize(nd);
      b.shape.resize(nd);
      for (size_t d = 0; d < nd; ++d) {
        b.offset[d] = int64_t(rng() % 12);
        b.shape[d] = int64_t(rng() % 4);  // empty boxes too
      }
    }
    bool any = false;
    for (size_t i = 0; i < boxes.size(); ++i)
      for (size_t j = i + 1; j < boxes.size(); ++j) any |= intersect(boxes[i], boxes[j]).has_value();
    const auto pair = first_overlap(boxes);
    ASSERT_EQ(pair.has_value(), any) << "trial " << trial;
    if (pair) {
      EXPECT_TRUE(intersect(boxes[pair->first], boxes[pair->second]).has_value());
    }
  }
  // A layout's tiling: 1024 row bands, and a 32 x 32 grid.
  std::vector<Box> bands, grid;
  for (int64_t r = 0; r < 1024; ++r) bands.push_back(Box{{r * 3, 0}, {3, 7}});
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c = 0; c < 32; ++c) grid.push_back(Box{{r * 2, c * 5}, {2, 5}});
  EXPECT_FALSE(first_overlap(bands).has_value());
  EXPECT_FALSE(first_overlap(grid).has_value());
  grid.push_back(Box{{3, 9}, {1, 2}});
  EXPECT_TRUE(first_overlap(grid).has_value());
}

TEST(CheckpointPlan, EveryBlockOnceSpreadOverReplicas) {
  // Eight replicated tensors on 4 ranks, and a (2, 2) mesh with one dim replicated: each block once, writers spread.
  std::vector<SavedTensor> ts;
  std::vector<std::vector<Box>> boxes(4);
  auto add = [&](const std::string& name, const Shape& shape, const MeshShape& mesh, const std::string& spec) {
    ts.push_back({name, DType::f32, shape, ShardingSpec::parse(spec)});
    const auto b = boxes_of(shape, mesh, ts.back().spec);
    for (size_t r = 0; r < 4; ++r) boxes[r].push_back(b[r]);
  };
  for (int i = 0; i < 8; ++i) add("r" + std::to_string(i), {16, 4}, MeshShape({4}), "R");
  add("s", {5, 4}, MeshShape({2, 2}), "S(0),R");
  const auto plan = plan_writers(ts, boxes);
  std::vector<int64_t> bytes(4, 0);
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_EQ(plan[i].size(), 1u);
    bytes[size_t(plan[i][0].writer)] += 16 * 4 * 4;
  }
  for (int64_t b : bytes) EXPECT_EQ(b, 2 * 16 * 4 * 4) << "replicated tensors spread evenly";
  ASSERT_EQ(plan[8].size(), 2u) << "two row blocks (3 + 2 rows), each written once";
  EXPECT_EQ(plan[8][0].box, (Box{{0, 0}, {3, 4}}));
  EXPECT_EQ(plan[8][1].box, (Box{{3, 0}, {2, 4}}));
  for (const PlannedBlock& b : plan[8]) {
    const auto coord = MeshShape({2, 2}).coordinate_of(b.writer);
    EXPECT_EQ(coord[0], b.box.offset[0] == 0 ? 0 : 1) << "the writer holds the block";
  }
}

TEST(CheckpointSave, TensorsOnTheTpSubMeshesOfEveryDpGroupAreSavedOnce) {
  // A tensor-parallel model replicated over dp: each dp group has its own tp sub-mesh (ranks {0, 1} and {2, 3}).
  const std::string dir = temp_dir() + "/ck";
  const Tensor w = Tensor::randn({6, 5}, 3);
  run_threads(4, [&](CommunicatorPtr world) {
    set_default_world(world, /*this_thread_only=*/true);
    const DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {2, 2}, {"dp", "tp"});
    save(dir, {{"w", distribute_tensor(w, mesh["tp"], {Shard{0}}, {}, std::nullopt)}});
  });
  const Index idx = read_checkpoint_index(dir);
  ASSERT_EQ(idx.tensors.size(), 1u);
  EXPECT_EQ(idx.tensors[0].chunks.size(), 2u) << "two row blocks, each once";
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    DTensor t = distribute_tensor(Tensor::zeros({6, 5}), mesh, {Replicate{}}, {}, std::nullopt);
    load(dir, {{"w", t}});
    EXPECT_TRUE(equal(t.to_local(), w));
  });
}

// ---- formats ----

TEST(CheckpointFormat, SafetensorsHeaderRoundTripAndRefusals) {
  std::vector<SafetensorsEntry> es{
      {"a", DType::bf16, {3, 2}, 0, 0}, {"b.c", DType::b8, {}, 0, 0}, {"e", DType::i64, {0, 5}, 0, 0}};
  const std::string bytes = encode_safetensors_header(es, {{"format", "pt"}});
  EXPECT_EQ(bytes.size() % 8, 0u);
  const SafetensorsHeader h = parse_safetensors_header(std::string_view(bytes).substr(8), 13, "t");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].end, 12u);
  EXPECT_EQ(h.tensors[1].dtype, DType::b8);
  EXPECT_EQ(h.tensors[1].end - h.tensors[1].begin, 1u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  auto refuses = [](const std::string& json, const std::string& needle) {
    try {
      parse_safetensors_header(json, 1000, "f.safetensors");
      ADD_FAILURE() << "accepted: " << json;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("f.safetensors"), std::string::npos) << e.what();
    }
  };
  refuses("{\"a\":", "not valid JSON");
  refuses("[1]", "not a JSON object");
  refuses(R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "does not support");
  refuses(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "not a size");
  refuses(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "needs 8");
  refuses(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", "bad data_offsets");
  refuses(R"({"a":{"dtype":"F32","shape":[300],"data_offsets":[0,1200]}})", "truncated");
  refuses(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      "overlap");
  refuses(R"({"a":{"dtype":"F32","shape":[4611686018427387903,4611686018427387903],"data_offsets":[0,4]}})",
          "too large");
}

TEST(CheckpointFormat, IndexChecksumCatchesDamageThatStillParses) {
  Index index;
  index.save_id = "0123456789abcdef";
  index.world_size = 2;
  index.page_bytes = 8;
  index.metadata = {{"step", int64_t(7)}, {"lr", 0.5}, {"tag", std::string("x")}, {"flag", true}};
  index.file_bytes = {{"f.safetensors", 100}};
  index.tensors.push_back({"w", DType::f32, {2, 3}, "S(0)", {}});
  index.tensors[0].chunks.push_back({Box{{0, 0}, {1, 3}}, "f.safetensors", 8, 12, {1, 2}});
  index.tensors[0].chunks.push_back({Box{{1, 0}, {1, 3}}, "f.safetensors", 20, 12, {3, 4}});
  const std::string text = encode_index(index);
  const Index back = parse_index(text, "idx");
  EXPECT_EQ(back.metadata, index.metadata);
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].chunks[1].page_crcs, (std::vector<uint32_t>{3, 4}));
  std::string damaged = text;
  damaged[damaged.find("\"begin\":20") + 9] = '4';  // still valid JSON, a wrong offset
  EXPECT_THROW(parse_index(damaged, "idx"), InvalidArgument);
  EXPECT_THROW(parse_index(text.substr(0, text.size() / 2), "idx"), InvalidArgument);
  // Chunks that overlap or leave a hole are refused even with a right checksum.
  Index holes = index;
  holes.tensors[0].chunks.pop_back();
  EXPECT_THROW(parse_index(encode_index(holes), "idx"), InvalidArgument);
  Index escape = index;
  escape.file_bytes = {{"../f.safetensors", 100}};
  EXPECT_THROW(parse_index(encode_index(escape), "idx"), InvalidArgument);
}

// ---- round trips between layouts ----

struct Case {
  std::string name;
  Shape shape;
  DType dtype;
};

const std::vector<Case> kTensors{
    {"w", {7, 5}, DType::f32},    {"emb.weight", {5, 6}, DType::bf16}, {"b", {3}, DType::f64},
    {"h", {2, 3, 5}, DType::f16}, {"idx", {6, 2}, DType::i64},         {"e", {0, 4}, DType::i32},
    {"mask", {4, 4}, DType::b8},  {"bytes", {9}, DType::u8},           {"s", {}, DType::i8}};

ShardingSpec pick_spec(std::mt19937& rng, int64_t ndim, int64_t mesh_ndim, bool partial) {
  const auto specs =
      op_test::specs_for(ndim, mesh_ndim, partial ? std::vector<ReduceOp>{ReduceOp::kSum} : std::vector<ReduceOp>{});
  return specs[rng() % specs.size()];
}

// Saves kTensors with random layouts on `save_mesh`, loads them with random layouts on each of `load_meshes`;
// every load must equal the saved full tensors bit for bit.
void round_trip(const std::vector<int64_t>& save_mesh, const std::vector<std::vector<int64_t>>& load_meshes,
                uint64_t seed, uint64_t page_bytes) {
  const std::string dir = temp_dir() + "/ck";
  std::mutex mu;
  std::vector<Tensor> saved(kTensors.size());
  op_test::on_mesh(save_mesh, [&](const DeviceMesh& mesh) {
    std::mt19937 rng{uint32_t(seed)};
    TensorList list;
    for (size_t i = 0; i < kTensors.size(); ++i) {
      const Case& c = kTensors[i];
      const bool fp = is_floating(c.dtype) && c.dtype != DType::f16 && c.dtype != DType::bf16;
      const ShardingSpec spec = pick_spec(rng, int64_t(c.shape.size()), mesh.ndim(), fp);
      DTensor t = spec.has_partial()
                      ? op_test::random_dtensor(op_test::InputGen(c.shape, c.dtype), mesh, spec, seed + i)
                      : distribute_tensor(random_full(c.shape, c.dtype, seed + i), mesh, spec.placements(),
                                          spec.shard_order(), std::nullopt);
      const Tensor full = t.full_tensor();
      if (mesh.global_rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        saved[i] = full;
      }
      list.push_back({c.name, t});
    }
    save(dir, list, {{"step", int64_t(seed)}}, {.page_bytes = page_bytes});
  });
  for (const auto& lm : load_meshes) {
    op_test::on_mesh(lm, [&](const DeviceMesh& mesh) {
      std::mt19937 rng(uint32_t(seed * 31 + uint64_t(mesh.size())));
      TensorList list;
      std::vector<std::string> specs;
      for (const Case& c : kTensors) {
        const ShardingSpec spec = pick_spec(rng, int64_t(c.shape.size()), mesh.ndim(), false);
        specs.push_back(spec.to_string());
        list.push_back({c.name, distribute_tensor(Tensor::zeros(c.shape, c.dtype), mesh, spec.placements(),
                                                  spec.shard_order(), std::nullopt)});
      }
      std::vector<const void*> before;
      for (const auto& [n, t] : list) before.push_back(t.to_local().storage().get());
      const LoadResult r = load(dir, list);
      EXPECT_EQ(std::get<int64_t>(r.metadata.at("step")), int64_t(seed));
      for (size_t i = 0; i < list.size(); ++i) {
        EXPECT_EQ(list[i].second.to_local().storage().get(), before[i]) << "loaded in place";
        EXPECT_TRUE(equal(list[i].second.full_tensor(), saved[i]))
            << kTensors[i].name << " saved on " << shape_str(save_mesh) << ", loaded as " << specs[i] << " on "
            << shape_str(lm) << " (seed " << seed << ")";
      }
    });
  }
}

TEST(CheckpointRoundTrip, RandomLayoutsAndWorldSizes) {
  round_trip({4}, {{2, 2}, {1}, {3}}, 1, 64 * 1024);
  round_trip({2, 2}, {{4}, {3}, {1}}, 2, 64 * 1024);
  round_trip({3}, {{2, 2}, {2}}, 3, 64 * 1024);
  round_trip({1}, {{2, 2}, {3}}, 4, 64 * 1024);
}

TEST(CheckpointRoundTrip, TinyPagesThroughEveryReadPath) {
  // 8- and 24-byte pages: runs start and end inside pages, share pages, and span many.
  round_trip({2, 2}, {{3}, {1}, {4}}, 5, 8);
  round_trip({3}, {{2, 2}, {1}}, 6, 24);
}

TEST(CheckpointLoad, ReadsOnlyItsShareAndStrictness) {
  const std::string dir = temp_dir() + "/ck";
  const Tensor w = Tensor::randn({64, 512}, 9);  // 128 KiB
  const Tensor b = Tensor::randn({512}, 10);
  op_test::on_mesh({4}, [&](const DeviceMesh& mesh) {
    save(dir,
         {{"w", distribute_tensor(w, mesh, {Shard{0}}, {}, std::nullopt)},
          {"b", distribute_tensor(b, mesh, {Replicate{}}, {}, std::nullopt)}},
         {}, {.page_bytes = 4096});
  });
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor w2 = distribute_tensor(Tensor::zeros({64, 512}), mesh, {Shard{0}}, {}, std::nullopt);
    DTensor c = distribute_tensor(Tensor::zeros({3}), mesh, {Replicate{}}, {}, std::nullopt);
    try {
      load(dir, {{"w", w2}, {"c", c}});
      ADD_FAILURE() << "strict load accepted a missing and an unexpected tensor";
    } catch (const InvalidArgument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("missing from the checkpoint: 'c'"), std::string::npos) << m;
      EXPECT_NE(m.find("in the checkpoint but not given: 'b'"), std::string::npos) << m;
    }
    EXPECT_TRUE(equal(w2.to_local(), Tensor::zeros(w2.to_local().shape()))) << "nothing loaded by a refused load";
    const LoadResult r = load(dir, {{"w", w2}, {"c", c}}, {.strict = false});
    EXPECT_EQ(r.missing, std::vector<std::string>{"c"});
    EXPECT_EQ(r.unexpected, std::vector<std::string>{"b"});
    EXPECT_TRUE(equal(w2.full_tensor(), w));
    EXPECT_EQ(r.bytes_read, 64u * 512 * 4 / 2) << "rows of page-aligned chunks: exactly this rank's half";
  });
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    // Columns: every row contributes a run; still at most the overlapping chunks' pages, here all of them (a page
    // is one row of 2 KiB... 4 KiB = two rows, so every page is needed).
    DTensor w2 = distribute_tensor(Tensor::zeros({64, 512}), mesh, {Shard{1}}, {}, std::nullopt);
    const LoadResult r = load(dir, {{"w", w2}}, {.strict = false});
    EXPECT_TRUE(equal(w2.full_tensor(), w));
    EXPECT_LE(r.bytes_read, 64u * 512 * 4);
  });
}

TEST(CheckpointLoad, MismatchedShapeOrDtypeNamesTheTensor) {
  const std::string dir = temp_dir() + "/ck";
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    save(dir, {{"w", distribute_tensor(Tensor::randn({4, 3}, 1), mesh, {Shard{0}}, {}, std::nullopt)}});
    for (const auto& [shape, dtype] :
         std::vector<std::pair<Shape, DType>>{{{4, 4}, DType::f32}, {{4, 3}, DType::f64}}) {
      DTensor t = distribute_tensor(Tensor::zeros(shape, dtype), mesh, {Shard{0}}, {}, std::nullopt);
      try {
        load(dir, {{"w", t}});
        ADD_FAILURE() << "accepted " << shape_str(shape);
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'w' is f32 [4, 3]"), std::string::npos) << e.what();
      }
    }
  });
}

TEST(CheckpointSave, RanksThatDisagreeAreNamed) {
  const std::string dir = temp_dir() + "/ck";
  op_test::on_mesh({3}, [&](const DeviceMesh& mesh) {
    const Shape shape = mesh.global_rank() == 2 ? Shape{5, 3} : Shape{4, 3};
    DTensor t = distribute_tensor(Tensor::zeros(shape), mesh, {Replicate{}}, {}, std::nullopt);
    try {
      save(dir, {{"w", t}});
      ADD_FAILURE() << "saved different tensors";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2 passed other tensors than rank 0"), std::string::npos) << e.what();
    }
  });
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    // Same names and shapes, different placements: the blocks overlap.
    DTensor t =
        distribute_tensor(Tensor::zeros({4, 3}), mesh,
                          {mesh.global_rank() == 1 ? Placement(Replicate{}) : Placement(Shard{0})}, {}, std::nullopt);
    try {
      save(dir, {{"w", t}});
      ADD_FAILURE() << "saved overlapping blocks";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("different placements"), std::string::npos) << e.what();
    }
  });
  EXPECT_FALSE(is_complete(dir));
}

TEST(CheckpointSave, AsyncSavesTheValuesAtTheCallAndOverwritesAtomically) {
  const std::string dir = temp_dir() + "/ck";
  const Tensor a = Tensor::randn({10, 6}, 1), b = Tensor::randn({10, 6}, 2);
  std::mutex mu;
  std::set<std::string> first_files;
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor t = distribute_tensor(a, mesh, {Shard{1}}, {}, std::nullopt);
    SaveHandle h = save_async(dir, {{"t", t}}, {{"step", int64_t(1)}});
    Tensor(t.to_local()).fill_(7);  // the next step changes the parameter; the save keeps the old values
    h.wait();
    if (mesh.global_rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      for (const std::string& f : list_dir(dir)) first_files.insert(f);
    }
    // Overwrite the same folder: new file names; afterwards only the new save's files remain.
    DTensor u = distribute_tensor(b, mesh, {Shard{0}}, {}, std::nullopt);
    save_async(dir, {{"t", u}}, {{"step", int64_t(2)}}).wait();
  });
  const Index idx = read_checkpoint_index(dir);
  EXPECT_EQ(std::get<int64_t>(idx.metadata.at("step")), 2);
  for (const std::string& f : list_dir(dir)) {
    EXPECT_FALSE(first_files.count(f) && f != kIndexName) << f << " of the first save was not removed";
    EXPECT_TRUE(f == kIndexName || idx.file_bytes.count(f)) << "stray file " << f;
  }
  op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
    DTensor t = distribute_tensor(Tensor::zeros({10, 6}), mesh, {Replicate{}}, {}, std::nullopt);
    load(dir, {{"t", t}});
    EXPECT_TRUE(equal(t.to_local(), b));
  });
  EXPECT_EQ(verify(dir), 10u * 6 * 4);
}

TEST(CheckpointSave, LatestPicksTheGreatestCompleteStep) {
  const std::string root = temp_dir();
  op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
    DTensor t = distribute_tensor(Tensor::randn({4}, 1), mesh, {Shard{0}}, {}, std::nullopt);
    for (int64_t step : {5, 20, 10}) save(root + "/step-" + std::to_string(step), {{"t", t}}, {{"step", step}});
  });
  make_dirs(root + "/step-30");  // an interrupted save: no index
  write_file_atomically(root + "/step-30/0123456789abcdef-r0.safetensors", "partial");
  EXPECT_EQ(latest(root), root + "/step-20");
  EXPECT_FALSE(latest(root + "/nothing-here").has_value());
  make_dirs(root + "/step-1");  // an older interrupted save
  // Keep the two newest (20, 10): step-5 and the interrupted step-1 go; step-30 (newer, maybe in flight) stays.
  std::vector<std::string> removed = prune(root, 2);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/step-1", root + "/step-5"}));
  std::vector<std::string> left = list_dir(root);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-10", "step-20", "step-30"}));
  // A restarted job (no save of its own in flight): every interrupted save goes, the newer step-30 included.
  EXPECT_EQ(remove_interrupted(root), (std::vector<std::string>{root + "/step-30"}));
  left = list_dir(root);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-10", "step-20"}));
  EXPECT_TRUE(remove_interrupted(root + "/nothing-here").empty());
}

// ---- damaged files ----

class Damaged : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir() + "/ck";
    op_test::on_mesh({2}, [&](const DeviceMesh& mesh) {
      save(dir_, {{"w", distribute_tensor(full_, mesh, {Shard{0}}, {}, std::nullopt)}}, {}, {.page_bytes = 1024});
    });
    for (const auto& [f, n] : read_checkpoint_index(dir_).file_bytes) files_.push_back(join_path(dir_, f));
    ASSERT_EQ(files_.size(), 2u);
  }
  // Loads on one process and expects an InvalidArgument mentioning every needle.
  void expect_refused(const std::vector<std::string>& needles) {
    op_test::on_mesh({1}, [&](const DeviceMesh& mesh) {
      DTensor t = distribute_tensor(Tensor::zeros({32, 64}), mesh, {Replicate{}}, {}, std::nullopt);
      try {
        load(dir_, {{"w", t}});
        ADD_FAILURE() << "loaded a damaged checkpoint";
      } catch (const InvalidArgument& e) {
        for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
      }
    });
    EXPECT_THROW(verify(dir_), InvalidArgument);
  }
  void flip_byte(const std::string& path, uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(offset));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x10);
    f.seekp(std::streamoff(offset));
    f.write(&c, 1);
  }
  const Tensor full_ = Tensor::randn({32, 64}, 4);
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(Damaged, FlippedDataByte) {
  flip_byte(files_[1], File(files_[1], File::Mode::kRead).size() - 100);
  expect_refused({"tensor 'w'", files_[1], "fails its checksum"});
}

TEST_F(Damaged, TruncatedFile) {
  ASSERT_EQ(::truncate(files_[0].c_str(), 4000), 0);
  expect_refused({files_[0], "truncated"});
}

TEST_F(Damaged, MissingFile) {
  remove_file(files_[1]);
  expect_refused({files_[1], "missing"});
}

TEST_F(Damaged, DamagedIndex) {
  flip_byte(join_path(dir_, kIndexName), 30);
  expect_refused({kIndexName});
  EXPECT_FALSE(is_complete(dir_));
}

// ---- safetensors files ----

TEST(CheckpointSafetensors, ExportFromShardsImportIntoAnyLayout) {
  const std::string dir = temp_dir();
  const Tensor w = Tensor::randn({7, 5}, 1), e = Tensor::randn({5, 6}, 2).to(DType::bf16);
  const Tensor s = Tensor::rand({9}, 3, DType::i64, -5, 5);
  op_test::on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    TensorList list{{"w", distribute_tensor(w, mesh, {Shard{1}, Shard{0}}, {}, std::nullopt)},
                    {"e", distribute_tensor(e, mesh, {Replicate{}, Shard{1}}, {}, std::nullopt)},
                    {"s", distribute_tensor(s, mesh, {Shard{0}, Shard{0}}, {{0, {1, 0}}}, std::nullopt)}};
    // The progress of each rank: from (0, its bytes) up to (its bytes, its bytes); every block written once.
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    ExportOptions o;
    o.progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
    export_safetensors(dir + "/model.safetensors", list, o);
    ASSERT_GE(calls.size(), 1u);
    EXPECT_EQ(calls.front().first, 0u);
    EXPECT_EQ(calls.back().first, calls.back().second);
    for (size_t i = 1; i < calls.size(); ++i) {
      EXPECT_GT(calls[i].first, calls[i - 1].first);
      EXPECT_EQ(calls[i].second, calls.front().second);
    }
    Tensor total = Tensor::from_vector({double(calls.back().second)}, {1}, DType::f64);
    mesh.world()->all_reduce(total, ReduceOp::kSum)->wait();
    EXPECT_EQ(total.item(), double(w.nbytes() + e.nbytes() + s.nbytes()));
    export_safetensors(dir + "/hf/model.safetensors.index.json", list, {.max_shard_bytes = 100});
  });
  // The single file, read back as plain tensors through the safetensors header.
  const SafetensorsHeader h = read_safetensors_header(dir + "/model.safetensors");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(list_dir(dir + "/hf").size(), 4u) << "three shards (140 B, 60 + 72 B) and the index";
  for (const std::string& path : {dir + "/model.safetensors", dir + "/hf/model.safetensors.index.json"}) {
    op_test::on_mesh({3}, [&](const DeviceMesh& mesh) {
      DTensor w2 = distribute_tensor(Tensor::zeros({7, 5}), mesh, {Shard{0}}, {}, std::nullopt);
      DTensor e2 = distribute_tensor(Tensor::zeros({5, 6}, DType::bf16), mesh, {Shard{1}}, {}, std::nullopt);
      DTensor s2 = distribute_tensor(Tensor::zeros({9}, DType::i64), mesh, {Replicate{}}, {}, std::nullopt);
      import_safetensors(path, {{"w", w2}, {"e", e2}, {"s", s2}});
      EXPECT_TRUE(equal(w2.full_tensor(), w)) << path;
      EXPECT_TRUE(equal(e2.full_tensor(), e)) << path;
      EXPECT_TRUE(equal(s2.full_tensor(), s)) << path;
    });
  }
}

TEST(CheckpointSafetensors, ExportOfACheckpointFolderEqualsTheLiveExport) {
  const std::string dir = temp_dir();
  const Tensor w = Tensor::randn({9, 4}, 5);
  op_test::on_mesh({3}, [&](const DeviceMesh& mesh) {
    TensorList list{{"w", distribute_tensor(w, mesh, {Shard{0}}, {}, std::nullopt)}};
    save(dir + "/ck", list);
    export_safetensors(dir + "/live.safetensors", list);
  });
  uint64_t last = 0, total = 0;
  ExportOptions o;
  o.progress = [&](uint64_t done, uint64_t all) { last = done, total = all; };
  export_checkpoint(dir + "/ck", dir + "/offline.safetensors", o);
  EXPECT_EQ(total, w.nbytes());
  EXPECT_EQ(last, total);
  EXPECT_EQ(read_whole_file(dir + "/offline.safetensors"), read_whole_file(dir + "/live.safetensors"));
}

}  // namespace
}  // namespace dt::checkpoint
