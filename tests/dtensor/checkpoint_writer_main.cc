// The writer and the checker of the kill test (test_checkpoint_kill.py).
//
//   dtrun -n 2 checkpoint_writer write ROOT MODE OUT   saves step 1, 2, ... until killed (or 200 saves); rank 0
//                                                      writes OUT/progress (the last step whose save returned)
//   checkpoint_writer check ROOT OUT                   one process: every complete checkpoint under ROOT verifies
//                                                      and loads bit-exact; the newest is at least the progress
//
// MODE: sync-new, async-new (a folder per step), sync-same, async-same (every step into ROOT/same).
// The values of step k are a function of k alone, so the checker recomputes them.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "collectives/process_group.h"
#include "collectives/thread/thread_comm.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/plan.h"

namespace dt {
namespace {

struct Spec {
  const char* name;
  Shape shape;
  DType dtype;
  std::vector<Placement> placements;
};

// About 5 MB per save: a sharded matrix, a replicated one (written once, by one rank), an uneven integer vector.
const std::vector<Spec> kSpecs{{"w", {1024, 1024}, DType::f32, {Shard{0}}},
                               {"r", {333, 700}, DType::f32, {Replicate{}}},
                               {"i", {4097}, DType::i64, {Shard{0}}}};

Tensor value(const Spec& s, int64_t step, size_t i) {
  const uint64_t seed = uint64_t(step) * 100 + i;
  if (s.dtype == DType::i64) return Tensor::rand(s.shape, seed, DType::i64, -1000, 1000);
  return Tensor::rand(s.shape, seed, s.dtype, -1, 1);  // uniform: cheap to draw, so kills land in saves
}

int write(const std::string& root, const std::string& mode, const std::string& out) {
  CommunicatorPtr world = init_process_group();
  DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {world->size()});
  { std::ofstream(out + "/pid" + std::to_string(world->rank())) << ::getpid() << "\n"; }
  const bool async = mode.rfind("async", 0) == 0;
  const bool same = mode.find("same") != std::string::npos;
  checkpoint::SaveHandle pending;
  int64_t pending_step = 0;
  auto finish = [&]() {
    if (!pending.valid()) return;
    pending.wait();
    if (world->rank() == 0) checkpoint::write_file_atomically(out + "/progress", std::to_string(pending_step));
    pending = {};
  };
  for (int64_t step = 1; step <= 200; ++step) {
    checkpoint::TensorList list;
    for (size_t i = 0; i < kSpecs.size(); ++i)
      list.push_back(
          {kSpecs[i].name, distribute_tensor(value(kSpecs[i], step, i), mesh, kSpecs[i].placements, {}, std::nullopt)});
    const std::string dir = same ? root + "/same" : root + "/step-" + std::to_string(step);
    if (async) {
      finish();
      pending = checkpoint::save_async(dir, list, {{"step", step}});
      pending_step = step;
    } else {
      checkpoint::save(dir, list, {{"step", step}});
      if (world->rank() == 0) checkpoint::write_file_atomically(out + "/progress", std::to_string(step));
    }
  }
  finish();
  destroy_process_group();
  return 0;
}

int check(const std::string& root, const std::string& out) {
  CommunicatorPtr world = make_thread_world(1)[0];
  set_default_world(world);
  DeviceMesh mesh = DeviceMesh::create(world, Device::cpu(), {1});
  int64_t progress = 0;
  std::ifstream(out + "/progress") >> progress;
  int64_t newest = 0, complete = 0, incomplete = 0, stray = 0;
  for (const std::string& name : checkpoint::list_dir(root)) {
    const std::string dir = checkpoint::join_path(root, name);
    if (!checkpoint::is_complete(dir)) {
      ++incomplete;
      continue;
    }
    checkpoint::verify(dir);
    // Files of an interrupted later save into the same folder (removed by the next complete save).
    const checkpoint::Index index = checkpoint::read_checkpoint_index(dir);
    for (const std::string& f : checkpoint::list_dir(dir))
      stray += checkpoint::is_checkpoint_file(f) && !index.file_bytes.count(f);
    checkpoint::TensorList list;
    for (const Spec& s : kSpecs)
      list.push_back(
          {s.name, distribute_tensor(Tensor::zeros(s.shape, s.dtype), mesh, {Replicate{}}, {}, std::nullopt)});
    const checkpoint::LoadResult r = checkpoint::load(dir, list);
    const int64_t step = std::get<int64_t>(r.metadata.at("step"));
    for (size_t i = 0; i < kSpecs.size(); ++i)
      if (!equal(list[i].second.to_local(), value(kSpecs[i], step, i))) {
        std::cout << "FAIL: " << dir << " (step " << step << ") tensor " << kSpecs[i].name << " differs\n";
        return 1;
      }
    newest = std::max(newest, step);
    ++complete;
  }
  const auto latest = checkpoint::latest(root);
  std::cout << "complete " << complete << " incomplete " << incomplete << " stray files " << stray << " newest "
            << newest << " progress " << progress << " latest " << latest.value_or("-") << "\n";
  if (newest < progress) {
    std::cout << "FAIL: the newest complete checkpoint is step " << newest << " but step " << progress
              << " had returned\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace dt

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "write" && argc == 5) return dt::write(argv[2], argv[3], argv[4]);
    if (cmd == "check" && argc == 4) return dt::check(argv[2], argv[3]);
    std::fprintf(stderr, "usage: checkpoint_writer write ROOT MODE OUT | check ROOT OUT\n");
    return 2;
  } catch (const std::exception& e) {
    std::cout << "FAIL: " << e.what() << "\n";
    return 1;
  }
}
