// A rank dies during an FSDP all-gather (driven by test_fsdp_faults.py through dtrun): the GPT sharded by
// fully_shard over every process trains; at step 2 the victim SIGKILLs itself in block 0's forward, right after
// FSDP's pre-forward started the prefetch all-gather of block 1. Every survivor must fail with an error naming the
// victim (no hang). Survivors ignore dtrun's SIGTERM so that they can report to $DT_TEST_OUT/rank<R>.txt.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "collectives/process_group.h"
#include "dtensor/ops.h"
#include "fsdp/fully_shard.h"
#include "nn/models/gpt.h"
#include "nn/optim.h"

namespace {

std::string g_out;
int g_rank = -1;

void report(const std::string& line) {
  std::ofstream f(g_out + "/rank" + std::to_string(g_rank) + ".txt", std::ios::app);
  f << line << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s VICTIM\n", argv[0]);
    return 2;
  }
  const char* out = std::getenv("DT_TEST_OUT");
  g_out = out ? out : ".";
  const int victim = std::atoi(argv[1]);
  dt::CommunicatorPtr world = dt::init_process_group();
  g_rank = world->rank();
  if (g_rank != victim) signal(SIGTERM, SIG_IGN);
  const auto t0 = std::chrono::steady_clock::now();
  int rc = 3;
  try {
    dt::DeviceMesh mesh = dt::DeviceMesh::create(dt::DeviceType::kCPU, {world->size(), 1}, {"dp", "tp"});
    dt::nn::GptConfig cfg;
    cfg.vocab = 64;
    cfg.dim = 64;
    cfg.layers = 2;
    cfg.heads = 4;
    cfg.hidden = 128;
    auto model = std::make_shared<dt::nn::Gpt>(cfg);
    model->materialize(mesh["tp"], 1);
    for (auto& block : model->layers) dt::fsdp::fully_shard(block, mesh["dp"]);
    dt::fsdp::fully_shard(model, mesh["dp"]);
    int64_t step = 0;
    model->layers[0]->register_forward_pre_hook([&](dt::nn::Module&, const std::vector<dt::nn::Variable>&) {
      if (step == 2 && g_rank == victim) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the prefetch is on the wire everywhere
        raise(SIGKILL);
      }
      return std::nullopt;
    });
    dt::nn::AdamW opt(model->parameters());
    for (step = 0; step < 50; ++step) {
      dt::Tensor ids = dt::Tensor::rand({2, 16}, uint64_t(step), dt::DType::i64, 0, double(cfg.vocab));
      dt::nn::Variable logits = (*model)(dt::nn::Variable(dt::as_replicate(ids, mesh["tp"])));
      dt::nn::sum(logits).backward();
      opt.step();
      opt.zero_grad();
    }
    report("no error");
  } catch (const dt::Error& e) {
    report(std::string("error ") + dt::error_code_name(e.code()) + ": " + e.what());
    report("after " + std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) +
           " s");
    rc = 0;
  }
  report("exit " + std::to_string(rc));
  world.reset();
  std::_Exit(rc);  // the group lost a member: skip the collective teardown
}
