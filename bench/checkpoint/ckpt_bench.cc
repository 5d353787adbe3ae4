// dtensor's side of bench/checkpoint: sharded checkpoints (dtensor/checkpoint/checkpoint.h) against this machine's
// plain file writes and reads of the same bytes, timed in the same run. The PyTorch side is
// bench/checkpoint/torch_dcp.py (torch.distributed.checkpoint on the same state); bench/checkpoint/run.py runs both.
//
//   build/tools/dtrun --nproc-per-node 2 build/bench/ckpt_bench                 (issue #16's MLP and AdamW state)
//   build/tools/dtrun --nproc-per-node 2 build/bench/ckpt_bench --mb 256        (256 MiB per rank in 16 tensors)
//
// The state: every tensor f32, a DTensor Shard(0) over a 1-d mesh of the world (torch.chunk's rows: uneven allowed).
// Default, the MLP of bench/fsdp with AdamW's two moments: per block `model.layers.i.norm.{weight,bias}` [D],
// `fc1.{weight [H, D], bias [H]}`, `fc2.{weight [D, H], bias [D]}` (H = 4 D), then for every parameter
// `optim.state.<name>.exp_avg` and `.exp_avg_sq` of its shape. `--mb N`: `synthetic.i` (i < 16) of [world * 16 N,
// 1024], N MiB per rank. Values: N(0, 1), a seeded function of (tensor, element), so every layout's blocks are known.
//
// Each round runs every mode once, with a barrier before each; a mode's time on a rank is from the barrier's end to
// its own end, and a round's time is the maximum over ranks. Modes:
//   save          dt::checkpoint::save into a fresh folder (returns when the index is durable).
//   save_async    the same through save_async: op "save_async_call" is the time until save_async returns (the part
//                 that blocks training), op "save_async" the time until wait() returns.
//   load          dt::checkpoint::load of this round's save into zeroed DTensors of the same layout.
//   load_reshard  the same checkpoint into zeroed DTensors Shard(1) (1-d tensors: Shard(0)).
//   raw_write     the reference: each rank writes its bytes (the same tensors' storage, one after the other) into a
//                 new file of its own by pwrite in 4 MiB pieces, then fsync (a save's durability).
//   raw_read      the reference: pread of that file, 4 MiB pieces, into the zeroed tensors.
// The order alternates from round to round within each pair (save / raw_write, load / raw_read). Every load and raw
// read is checked bit for bit against the values saved (outside the timed region). Reads come from the page cache
// (the files were just written); writes include the fsync.
//
// Output: per op, one JSON line from rank 0 with the median over the rounds after --warmup:
//   {"bench":"checkpoint","impl":"dtensor","op":"save",...,"ranks":2,"bytes_per_rank":..,"time_s":..,
//    "gbs_per_rank":..,"samples_s":[..]}
// bytes_per_rank is the largest rank's; loads add bytes_read_per_rank (the largest rank's bytes read, checksum
// pages included).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "collectives/exchange.h"
#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/dtensor.h"
#include "examples/program_world.h"
#include "placement/layout.h"
#include "tools/args.h"

namespace {

struct Args {
  int64_t layers = 4, dim = 512, mb = 0, rounds = 4, warmup = 1, threads = 0;
  std::string dir;  // parent of the benchmark's own folder
};

constexpr const char* kUsage =
    "usage: ckpt_bench [--layers 4] [--dim 512] [--mb N] [--rounds 4] [--warmup 1] [--dir PARENT]\n"
    "                  [--threads N]\n"
    "Run under dtrun. The MLP's state (parameters and AdamW moments), or --mb N MiB per rank in 16\n"
    "tensors; in a folder made under --dir (default $TMPDIR or /tmp), removed at the end.\n";

using dt::tools::UsageError;

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--layers", a.layers) || args.take("--dim", a.dim) || args.take("--mb", a.mb) ||
        args.take("--rounds", a.rounds) || args.take("--warmup", a.warmup) || args.take("--threads", a.threads) ||
        args.take("--dir", a.dir))
      continue;
    throw args.unexpected();
  }
  if (a.layers < 1 || a.dim < 1 || a.mb < 0 || a.threads < 0 || a.warmup < 0 || a.rounds <= a.warmup)
    throw UsageError{
        "--layers, --dim: at least 1; --mb, --threads, --warmup: at least 0; --rounds: more than --warmup"};
  if (a.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    a.dir = tmp && *tmp ? tmp : "/tmp";
  }
  return a;
}

struct Spec {
  std::string name;
  dt::Shape shape;
};

// The state's names and global shapes, in state-dict order (the model, then the optimizer).
std::vector<Spec> state_specs(const Args& a, int64_t world) {
  std::vector<Spec> specs;
  if (a.mb > 0) {
    for (int i = 0; i < 16; ++i) specs.push_back({"synthetic." + std::to_string(i), {world * 16 * a.mb, 1024}});
    return specs;
  }
  const int64_t d = a.dim, h = 4 * a.dim;
  for (int64_t i = 0; i < a.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const Spec& s : std::vector<Spec>{{p + "norm.weight", {d}},
                                           {p + "norm.bias", {d}},
                                           {p + "fc1.weight", {h, d}},
                                           {p + "fc1.bias", {h}},
                                           {p + "fc2.weight", {d, h}},
                                           {p + "fc2.bias", {d}}})
      specs.push_back(s);
  }
  const size_t params = specs.size();
  for (size_t i = 0; i < params; ++i)
    for (const char* m : {".exp_avg", ".exp_avg_sq"})
      specs.push_back({"optim.state." + specs[i].name + m, specs[i].shape});
  return specs;
}

// The block of tensor `index` that this rank holds under `placement`: zeros, or its values.
dt::DTensor make_block(const Spec& s, size_t index, const dt::DeviceMesh& mesh, dt::Placement placement, bool values) {
  const dt::ShardingSpec spec = dt::make_spec({placement}, {}, int64_t(s.shape.size()), mesh);
  const dt::Shape local = dt::local_shape(s.shape, mesh.shape(), spec, mesh.coordinate());
  const dt::Shape offset = dt::global_offset(s.shape, mesh.shape(), spec, mesh.coordinate());
  dt::Tensor t = values ? dt::Tensor::randn_block(s.shape, offset, local, 1000 + index) : dt::Tensor::zeros(local);
  return dt::DTensor::from_local(t, mesh, {placement}, s.shape);
}

dt::checkpoint::TensorList named(const std::vector<Spec>& specs, const std::vector<dt::DTensor>& ts) {
  dt::checkpoint::TensorList list;
  for (size_t i = 0; i < specs.size(); ++i) list.emplace_back(specs[i].name, ts[i]);
  return list;
}

void check_equal(const std::vector<Spec>& specs, const std::vector<dt::DTensor>& got,
                 const std::vector<dt::DTensor>& want, const char* op) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const dt::Tensor& g = got[i].to_local();
    const dt::Tensor& w = want[i].to_local();
    if (g.shape() != w.shape() || (g.nbytes() > 0 && std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()) != 0))
      DT_THROW(InternalError, "ckpt_bench: ", op, " gave other bytes than were saved for '", specs[i].name, "'");
  }
}

constexpr size_t kPiece = size_t(4) << 20;

[[noreturn]] void fail(const char* op, const std::string& path) {
  DT_THROW(SystemError, "ckpt_bench: ", op, " '", path, "' failed: ", std::strerror(errno));
}

// The reference write: the tensors' bytes one after the other into a new file, 4 MiB per pwrite, then fsync.
void raw_write(const std::string& path, const std::vector<dt::DTensor>& ts) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("open", path);
  off_t at = 0;
  for (const dt::DTensor& t : ts) {
    const char* p = static_cast<const char*>(t.to_local().data_ptr());
    const size_t n = t.to_local().nbytes();
    for (size_t done = 0; done < n;) {
      const ssize_t put = ::pwrite(fd, p + done, std::min(kPiece, n - done), at);
      if (put < 0) {
        if (errno == EINTR) continue;
        fail("write", path);
      }
      done += size_t(put);
      at += put;
    }
  }
  if (::fsync(fd) != 0) fail("fsync", path);
  if (::close(fd) != 0) fail("close", path);
}

// The reference read: the file back into the tensors, 4 MiB per pread.
void raw_read(const std::string& path, const std::vector<dt::DTensor>& ts) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", path);
  off_t at = 0;
  for (const dt::DTensor& t : ts) {
    char* p = static_cast<char*>(t.to_local().data_ptr());
    const size_t n = t.to_local().nbytes();
    for (size_t done = 0; done < n;) {
      const ssize_t got = ::pread(fd, p + done, std::min(kPiece, n - done), at);
      if (got < 0) {
        if (errno == EINTR) continue;
        fail("read", path);
      }
      if (got == 0) DT_THROW(SystemError, "ckpt_bench: '", path, "' is shorter than what was written");
      done += size_t(got);
      at += got;
    }
  }
  ::close(fd);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every rank's value, on every rank (nanosecond resolution for times).
std::vector<double> gather(dt::Communicator& world, double mine, double scale = 1e9) {
  std::vector<double> all;
  for (int64_t v : dt::all_gather_ints(world, {int64_t(mine * scale)})) all.push_back(double(v) / scale);
  return all;
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void zero(const std::vector<dt::DTensor>& ts) {
  for (const dt::DTensor& t : ts) dt::Tensor(t.to_local()).zero_();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = dt::tools::parse_or_exit("ckpt_bench", [&] { return parse(argc, argv); });
  try {
    const dt::examples::ProgramWorld program = dt::examples::join_world(a.threads);
    const dt::CommunicatorPtr& world = program.world;
    const int64_t rank = world->rank(), n = world->size();
    const bool lead = rank == 0;
    dt::DeviceMesh mesh = dt::DeviceMesh::create(dt::DeviceType::kCPU, {n}, {"world"});

    const std::vector<Spec> specs = state_specs(a, n);
    std::vector<dt::DTensor> source, target, reshard_target, reshard_want;
    int64_t my_bytes = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const dt::Placement resharded = specs[i].shape.size() > 1 ? dt::Placement(dt::Shard{1}) : dt::Shard{0};
      source.push_back(make_block(specs[i], i, mesh, dt::Shard{0}, true));
      target.push_back(make_block(specs[i], i, mesh, dt::Shard{0}, false));
      reshard_target.push_back(make_block(specs[i], i, mesh, resharded, false));
      reshard_want.push_back(make_block(specs[i], i, mesh, resharded, true));
      my_bytes += int64_t(source.back().to_local().nbytes());
    }
    const dt::checkpoint::TensorList saved = named(specs, source), loaded = named(specs, target),
                                     resharded = named(specs, reshard_target);
    const double bytes_per_rank = max_of(gather(*world, double(my_bytes), 1.0));

    // The benchmark's folder: rank 0's pid and a random number name it; rank 0 makes and removes it.
    const std::vector<int64_t> tag =
        dt::all_gather_ints(*world, {int64_t(::getpid()), int64_t(std::random_device{}())});
    const std::string base = (std::filesystem::path(a.dir) /
                              ("dt_ckpt_bench_" + std::to_string(tag[0]) + "_" + std::to_string(tag[1] & 0xffffff)))
                                 .string();
    if (lead) std::filesystem::create_directories(base);
    world->barrier()->wait();
    if (lead)
      std::fprintf(stderr, "ckpt_bench: %zu tensors, %.1f MiB per rank (largest rank), %lld ranks, folder %s\n",
                   specs.size(), bytes_per_rank / 1048576.0, (long long)n, base.c_str());

    std::map<std::string, std::vector<double>> times;  // op -> per counted round, the max over ranks
    std::map<std::string, double> bytes_read;          // load ops -> the largest rank's bytes read
    auto record = [&](int64_t round, const std::string& op, double secs) {
      const double t = max_of(gather(*world, secs));
      if (round >= a.warmup) times[op].push_back(t);
    };
    // Times fn on this rank from the end of a barrier.
    auto timed = [&](auto&& fn) {
      world->barrier()->wait();
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      return seconds_since(t0);
    };

    for (int64_t round = 0; round < a.rounds; ++round) {
      const std::string r = std::to_string(round);
      const std::string save_dir = base + "/save-" + r, async_dir = base + "/async-" + r;
      const std::string raw_path = base + "/raw-" + r + "-r" + std::to_string(rank) + ".bin";
      auto do_save = [&] { record(round, "save", timed([&] { dt::checkpoint::save(save_dir, saved); })); };
      auto do_raw_write = [&] { record(round, "raw_write", timed([&] { raw_write(raw_path, source); })); };
      auto do_load = [&] {
        zero(target);
        dt::checkpoint::LoadResult res;
        record(round, "load", timed([&] { res = dt::checkpoint::load(save_dir, loaded); }));
        check_equal(specs, target, source, "load");
        bytes_read["load"] = max_of(gather(*world, double(res.bytes_read), 1.0));
      };
      auto do_raw_read = [&] {
        zero(target);
        record(round, "raw_read", timed([&] { raw_read(raw_path, target); }));
        check_equal(specs, target, source, "raw_read");
      };
      if (round % 2 == 0) {
        do_raw_write();
        do_save();
      } else {
        do_save();
        do_raw_write();
      }
      {
        double call_s = 0;
        const double total_s = timed([&] {
          const auto t0 = std::chrono::steady_clock::now();
          dt::checkpoint::SaveHandle h = dt::checkpoint::save_async(async_dir, saved);
          call_s = seconds_since(t0);
          h.wait();
        });
        record(round, "save_async_call", call_s);
        record(round, "save_async", total_s);
      }
      if (round % 2 == 0) {
        do_raw_read();
        do_load();
      } else {
        do_load();
        do_raw_read();
      }
      zero(reshard_target);
      dt::checkpoint::LoadResult res;
      record(round, "load_reshard", timed([&] { res = dt::checkpoint::load(save_dir, resharded); }));
      check_equal(specs, reshard_target, reshard_want, "load_reshard");
      bytes_read["load_reshard"] = max_of(gather(*world, double(res.bytes_read), 1.0));

      world->barrier()->wait();
      std::filesystem::remove(raw_path);
      if (lead) {
        std::filesystem::remove_all(save_dir);
        std::filesystem::remove_all(async_dir);
        std::fprintf(stderr, "ckpt_bench: round %lld:", (long long)round);
        for (const auto& [op, v] : times)
          if (round >= a.warmup) std::fprintf(stderr, " %s %.4f s", op.c_str(), v.back());
        std::fprintf(stderr, "%s\n", round < a.warmup ? " (warm-up)" : "");
      }
      world->barrier()->wait();
    }
    if (lead) std::filesystem::remove_all(base);

    if (lead) {
      for (const char* op :
           {"save", "save_async_call", "save_async", "load", "load_reshard", "raw_write", "raw_read"}) {
        const std::vector<double>& v = times.at(op);
        const double t = median(v);
        std::string samples;
        for (double s : v) samples += (samples.empty() ? "" : ",") + std::to_string(s);
        std::string extra;
        if (auto it = bytes_read.find(op); it != bytes_read.end())
          extra = ",\"bytes_read_per_rank\":" + std::to_string(int64_t(it->second));
        std::printf(
            "{\"bench\":\"checkpoint\",\"impl\":\"dtensor\",\"op\":\"%s\",\"state\":\"%s\",\"ranks\":%lld,"
            "\"bytes_per_rank\":%lld,\"time_s\":%.6f,\"gbs_per_rank\":%.4f,\"rounds\":%zu,\"samples_s\":[%s]%s}\n",
            op, a.mb > 0 ? "synthetic" : "mlp", (long long)n, (long long)bytes_per_rank, t, bytes_per_rank / t / 1e9,
            v.size(), samples.c_str(), extra.c_str());
      }
      std::fflush(stdout);
    }
    if (program.launched) dt::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
