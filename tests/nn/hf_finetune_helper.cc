// The fine-tuning side of tests/python/test_hf_llama.py: loads a Hugging Face folder on a (dp, tp) mesh (FSDP or
// not), trains --steps steps of AdamW on the rows given (next-token cross-entropy, the mean over every row's tokens),
// prints each step's loss as a JSON line (rank 0), exports the model with nn::save_hf and writes the trained model's
// logits of the rows (safetensors, "logits"), for transformers to load and compare.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/ops/elementwise.h"
#include "examples/hf_model.h"
#include "examples/program_world.h"
#include "nn/optim.h"
#include "placement/layout.h"
#include "tools/args.h"

namespace {

constexpr const char* kUsage =
    "usage: hf_finetune_helper --model DIR --rows IDS;IDS;... [--dp N] [--tp N] [--fsdp] [--steps K] [--lr X]\n"
    "                          [--export DIR] [--export-dtype NAME] [--shard-bytes N] [--logits FILE]\n";

struct Args {
  std::string model, rows, export_dir, export_dtype, logits;
  int64_t dp = 1, tp = 1, steps = 3, shard_bytes = 0;
  double lr = 1e-3;
  bool fsdp = false;
};

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--model", a.model) || args.take("--rows", a.rows) || args.take("--dp", a.dp) ||
        args.take("--tp", a.tp) || args.take("--fsdp", a.fsdp) || args.take("--steps", a.steps) ||
        args.take("--lr", a.lr) || args.take("--export", a.export_dir) || args.take("--export-dtype", a.export_dtype) ||
        args.take("--shard-bytes", a.shard_bytes) || args.take("--logits", a.logits))
      continue;
    throw args.unexpected();
  }
  if (a.model.empty() || a.rows.empty()) throw dt::tools::UsageError{"--model and --rows are needed"};
  return a;
}

// "1,2,3;4,5,6" -> [2, 3] i64 (rows of one length).
dt::Tensor parse_rows(const std::string& text) {
  std::vector<int64_t> flat;
  int64_t rows = 0, cols = -1;
  for (const std::string& row : dt::tools::split_list(text, ';')) {
    const std::vector<int64_t> ids = dt::tools::parse_list<int64_t>(row);
    if (cols >= 0 && int64_t(ids.size()) != cols) throw dt::tools::UsageError{"--rows must all have one length"};
    cols = int64_t(ids.size());
    flat.insert(flat.end(), ids.begin(), ids.end());
    ++rows;
  }
  return dt::Tensor::from_data(flat, {rows, cols});
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = dt::tools::parse_or_exit("hf_finetune_helper", [&] { return parse(argc, argv); });
  const dt::examples::ProgramWorld program = dt::examples::join_world(1);
  int status = 0;
  try {
    if (!dt::examples::check_ranks(*program.world, a.dp, a.tp, "hf_finetune_helper")) return 2;
    dt::examples::HfModel m = dt::examples::load_hf_model(a.model, a.dp, a.tp, a.fsdp);
    const dt::Tensor all = parse_rows(a.rows);
    const dt::DeviceMesh tp = m.mesh["tp"], dp = m.mesh["dp"];
    // This dp rank's rows (torch.chunk's split), each a share of the global mean loss.
    const dt::IndexRange mine = dt::chunk_range(all.shape()[0], a.dp, dp.local_rank(0));
    const dt::Tensor rows = all.narrow(0, mine.begin, mine.size());
    const int64_t seq = all.shape()[1] - 1;
    const double tokens = double(all.shape()[0] * seq);
    const dt::Tensor ids = rows.narrow(1, 0, seq).contiguous(), targets = rows.narrow(1, 1, seq).contiguous();
    const std::vector<dt::nn::Variable> params = m.model->parameters();
    dt::nn::AdamW opt(params, {.lr = a.lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0});
    for (int64_t step = 1; step <= a.steps; ++step) {
      dt::nn::Variable logits = (*m.model)(dt::nn::Variable(dt::as_replicate(ids, tp)));
      dt::nn::Variable loss = dt::nn::div(
          dt::nn::cross_entropy(logits, dt::as_replicate(targets, tp), -100, dt::LossReduction::kSum), tokens);
      loss.backward();
      if (a.dp > 1 && !a.fsdp) dt::nn::all_reduce_gradients(params, dp, dt::ReduceOp::kSum);
      opt.step();
      opt.zero_grad();
      dt::Tensor l = loss.full_tensor().to(dt::DType::f64);
      if (a.dp > 1) dp.comm(0)->all_reduce(l, dt::ReduceOp::kSum)->wait();
      if (program.world->rank() == 0) std::printf("{\"step\": %lld, \"loss\": %.17g}\n", (long long)step, l.item());
    }
    if (!a.export_dir.empty())
      dt::nn::save_hf(
          a.export_dir, *m.model, m.config,
          {.dtype = a.export_dtype.empty() ? std::nullopt : std::optional(dt::dtype_from_name(a.export_dtype)),
           .max_shard_bytes = uint64_t(a.shard_bytes)});
    if (!a.logits.empty()) {
      dt::nn::NoGradGuard no_grad;
      m.model->eval();
      const dt::nn::Variable x(dt::as_replicate(all, tp));
      dt::checkpoint::export_safetensors(a.logits, {{"logits", (*m.model)(x).data()}});
    }
  } catch (const dt::tools::UsageError& e) {
    status = dt::tools::report_usage_error("hf_finetune_helper", e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_finetune_helper: rank %d: %s\n", program.world->rank(), e.what());
    status = 1;
  }
  if (program.launched) dt::destroy_process_group();
  return status;
}
