// dtensor's side of bench/attention: causal attention forward + backward on one process, the fused kernel
// (nn::fused_attention) or the composed one (nn::scaled_dot_product_attention: q k^T, mask, softmax, @ v), with
// autograd, on q, k, v [batch, heads, T, head_dim] f32. Prints one JSON line:
//   {"impl":"fused","t":1024,"fwd_bwd_s":[...every timed iteration...],"median_s":..,"saved_bytes":..}
// saved_bytes: what the forward leaves allocated for the backward (the output included), i.e. the activation memory
// of one attention layer, from dtensor's memory accounting.
// Usage: attention_bench --impl fused|composed [--t 1024] [--batch 1] [--heads 8] [--kv-heads 8] [--head-dim 64]
//                        [--iters 5] [--warmup 1] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "collectives/thread/thread_comm.h"
#include "core/memory_stats.h"
#include "dtensor/device_mesh.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/matmul.h"
#include "nn/autograd.h"
#include "nn/ops.h"
#include "tools/args.h"

namespace {

constexpr const char* kUsage =
    "usage: attention_bench --impl fused|composed [--t 1024] [--batch 1] [--heads 8] [--kv-heads 8]\n"
    "                       [--head-dim 64] [--iters 5] [--warmup 1] [--threads N]\n";

struct Args {
  std::string impl = "fused";
  int64_t t = 1024, batch = 1, heads = 8, kv_heads = 8, head_dim = 64, iters = 5, warmup = 1, threads = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--impl", a.impl) || args.take("--t", a.t) || args.take("--batch", a.batch) ||
        args.take("--heads", a.heads) || args.take("--kv-heads", a.kv_heads) || args.take("--head-dim", a.head_dim) ||
        args.take("--iters", a.iters) || args.take("--warmup", a.warmup) || args.take("--threads", a.threads))
      continue;
    throw args.unexpected();
  }
  if (a.impl != "fused" && a.impl != "composed") throw dt::tools::UsageError{"--impl is fused or composed"};
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = dt::tools::parse_or_exit("attention_bench", [&] { return parse(argc, argv); });
  dt::kernels::set_blas_threads(1);
  dt::kernels::set_intra_op_threads(int(a.threads));
  const dt::DeviceMesh mesh = dt::DeviceMesh::create(dt::make_thread_world(1)[0], dt::Device::cpu(), {1});
  auto input = [&](int64_t h, uint64_t seed) {
    return dt::nn::Variable(
        dt::as_replicate(dt::Tensor::randn({a.batch, h, a.t, a.head_dim}, seed, dt::DType::f32), mesh), true);
  };
  dt::nn::Variable q = input(a.heads, 1), k = input(a.kv_heads, 2), v = input(a.kv_heads, 3);
  const dt::DTensor grad_out =
      dt::as_replicate(dt::Tensor::randn({a.batch, a.heads, a.t, a.head_dim}, 4, dt::DType::f32), mesh);
  const dt::DTensor mask = dt::nn::causal_mask(a.t, a.t, mesh);
  const int64_t group = a.heads / a.kv_heads;
  auto forward = [&]() {
    if (a.impl == "fused") return dt::nn::fused_attention(q, k, v);
    auto repeat = [&](const dt::nn::Variable& y) {  // the composed path needs every query head's k and v
      if (group == 1) return y;
      return dt::nn::reshape(dt::nn::expand(dt::nn::unsqueeze(y, 2), {a.batch, a.kv_heads, group, a.t, a.head_dim}),
                             {a.batch, a.heads, a.t, a.head_dim});
    };
    return dt::nn::scaled_dot_product_attention(q, repeat(k), repeat(v), true, std::nullopt, mask);
  };
  std::vector<double> times;
  int64_t saved = 0;
  for (int64_t i = 0; i < a.warmup + a.iters; ++i) {
    const int64_t before = dt::memory_usage(dt::Device::cpu()).total_current;
    const auto t0 = std::chrono::steady_clock::now();
    dt::nn::Variable out = forward();
    saved = dt::memory_usage(dt::Device::cpu()).total_current - before;
    dt::nn::backward({out}, {grad_out});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (dt::nn::Variable* x : {&q, &k, &v}) x->zero_grad();
    if (i >= a.warmup) times.push_back(s);
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  std::printf(
      "{\"impl\":\"%s\",\"t\":%lld,\"batch\":%lld,\"heads\":%lld,\"kv_heads\":%lld,\"head_dim\":%lld,"
      "\"threads\":%lld,\"fwd_bwd_s\":[",
      a.impl.c_str(), (long long)a.t, (long long)a.batch, (long long)a.heads, (long long)a.kv_heads,
      (long long)a.head_dim, (long long)a.threads);
  for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.6f", i ? "," : "", times[i]);
  std::printf("],\"median_s\":%.6f,\"saved_bytes\":%lld}\n", sorted[sorted.size() / 2], (long long)saved);
  return 0;
}
