// Generation from a Hugging Face Llama-family folder on any (dp, tp) mesh, FSDP or not: prompts (token ids) in, the
// continuations out, with time to first token and decode tokens per second.
//
//   build/tools/dtrun --nproc-per-node 2 build/examples/generate --model llama-folder --tp 2
//       --prompt 1,450,4996 --prompt 1,3118 --max-new-tokens 32
//
// --logits FILE also writes the logits of every position of the prompts (one forward, no cache; the prompts must be
// of one length) into a safetensors file as "logits" [batch, seq, vocab] (tests compare them with transformers').
#include "nn/models/generate.h"

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "dtensor/checkpoint/checkpoint.h"
#include "dtensor/ops/elementwise.h"
#include "examples/hf_model.h"
#include "examples/program_world.h"
#include "tools/args.h"

namespace {

constexpr const char* kUsage =
    "usage: generate --model DIR [--dp N] [--tp N] [--fsdp] --prompt IDS [--prompt IDS ...]\n"
    "                [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop IDS]\n"
    "                [--threads N] [--warmup N] [--logits FILE] [--json]\n"
    "  --model DIR        a Hugging Face folder (config.json, model.safetensors or shards with their index)\n"
    "  --dp, --tp         the mesh (dp x tp processes under dtrun; default 1 x 1); --fsdp shards the weights over dp\n"
    "  --prompt IDS       comma-separated token ids, one prompt per --prompt (lengths may differ)\n"
    "  --temperature T    0 (default): greedy; otherwise sampling, with --top-k / --top-p and --seed\n"
    "  --stop IDS         comma-separated token ids that end a row (default: the config's eos_token_id)\n"
    "  --warmup N         generate N tokens first, untimed (first-call costs out of the figures)\n"
    "  --logits FILE      also write the prompts' logits (one forward) to FILE (safetensors, \"logits\")\n"
    "  --json             one JSON line with the tokens and timings instead of the text report\n";

struct Args {
  std::string model, logits;
  int64_t dp = 1, tp = 1, threads = 0, warmup = 0;
  bool fsdp = false, json = false;
  std::vector<std::vector<int64_t>> prompts;
  std::vector<int64_t> stop;
  bool stop_given = false;
  dt::nn::GenerateOptions gen;
};

Args parse(int argc, char** argv) {
  Args a;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (args.take("--model", a.model) || args.take("--dp", a.dp) || args.take("--tp", a.tp) ||
        args.take("--fsdp", a.fsdp) || args.take("--threads", a.threads) || args.take("--json", a.json) ||
        args.take("--warmup", a.warmup) || args.take("--logits", a.logits) ||
        args.take("--max-new-tokens", a.gen.max_new_tokens) || args.take("--temperature", a.gen.temperature) ||
        args.take("--top-k", a.gen.top_k) || args.take("--top-p", a.gen.top_p) || args.take("--seed", a.gen.seed))
      continue;
    if (args.is("--prompt")) {
      a.prompts.push_back(dt::tools::parse_list<int64_t>(args.value()));
      continue;
    }
    if (args.is("--stop")) {
      a.stop = dt::tools::parse_list<int64_t>(args.value());
      a.stop_given = true;
      continue;
    }
    throw args.unexpected();
  }
  if (a.model.empty() || a.prompts.empty()) throw dt::tools::UsageError{"--model and at least one --prompt are needed"};
  if (a.dp < 1 || a.tp < 1) throw dt::tools::UsageError{"--dp and --tp must be at least 1"};
  return a;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The logits of the prompts (all of one length) as one forward, written whole to `path` by every rank's blocks.
void write_logits(dt::examples::HfModel& m, const std::vector<std::vector<int64_t>>& prompts, const std::string& path) {
  const int64_t rows = int64_t(prompts.size()), seq = int64_t(prompts[0].size());
  std::vector<int64_t> flat;
  for (const auto& p : prompts) {
    if (int64_t(p.size()) != seq) throw dt::tools::UsageError{"--logits needs prompts of one length"};
    flat.insert(flat.end(), p.begin(), p.end());
  }
  dt::nn::NoGradGuard no_grad;
  m.model->eval();
  const dt::nn::Variable ids(dt::as_replicate(dt::Tensor::from_data(flat, {rows, seq}), m.mesh["tp"]));
  dt::checkpoint::export_safetensors(path, {{"logits", (*m.model)(ids).data()}});
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = dt::tools::parse_or_exit("generate", [&] { return parse(argc, argv); });
  const dt::examples::ProgramWorld program = dt::examples::join_world(a.threads);
  int status = 0;
  try {
    if (!dt::examples::check_ranks(*program.world, a.dp, a.tp, "generate")) return 2;
    const bool lead = program.world->rank() == 0;
    const auto t0 = std::chrono::steady_clock::now();
    dt::examples::HfModel m = dt::examples::load_hf_model(a.model, a.dp, a.tp, a.fsdp);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!a.logits.empty()) write_logits(m, a.prompts, a.logits);
    dt::nn::GenerateOptions o = a.gen;
    o.stop_tokens = a.stop_given ? a.stop : m.config.eos_token_ids;
    if (m.config.pad_token_id && *m.config.pad_token_id >= 0 && *m.config.pad_token_id < m.config.model.vocab)
      o.pad_token = *m.config.pad_token_id;
    if (a.warmup > 0) {
      dt::nn::GenerateOptions w = o;
      w.max_new_tokens = a.warmup;
      w.on_step = nullptr;
      dt::nn::generate(*m.model, m.mesh["tp"], a.prompts, w);
    }
    const dt::nn::GenerateResult r = dt::nn::generate(*m.model, m.mesh["tp"], a.prompts, o);
    if (lead && a.json) {
      std::printf("{\"tokens\": [");
      for (size_t b = 0; b < r.tokens.size(); ++b) std::printf("%s[%s]", b ? ", " : "", join(r.tokens[b]).c_str());
      std::printf("], \"time_to_first_token_s\": %.6f, \"decode_tokens_per_s\": %.3f, \"load_s\": %.3f}\n",
                  r.time_to_first_token_seconds, r.decode_tokens_per_second(), load_s);
    } else if (lead) {
      std::printf(
          "generate: %s (%s, %lld layers, dim %lld, %lld heads / %lld kv heads, vocab %lld) on dp %lld x tp "
          "%lld%s, loaded in %.2f s\n",
          a.model.c_str(), m.config.architecture.c_str(), (long long)m.config.model.layers,
          (long long)m.config.model.dim, (long long)m.config.model.heads, (long long)m.config.model.kv_head_count(),
          (long long)m.config.model.vocab, (long long)a.dp, (long long)a.tp, a.fsdp ? " (FSDP)" : "", load_s);
      for (size_t b = 0; b < r.tokens.size(); ++b)
        std::printf("  prompt %zu: [%s]\n  continuation: [%s]\n", b, join(a.prompts[b]).c_str(),
                    join(r.tokens[b]).c_str());
      std::printf("time to first token %.1f ms, decode %.1f tokens/s (%lld steps x %zu rows in %.3f s)\n",
                  1e3 * r.time_to_first_token_seconds, r.decode_tokens_per_second(), (long long)r.decode_steps,
                  r.tokens.size(), r.decode_seconds);
    }
  } catch (const dt::tools::UsageError& e) {
    status = dt::tools::report_usage_error("generate", e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: rank %d: %s\n", program.world->rank(), e.what());
    status = 1;
  }
  if (program.launched) dt::destroy_process_group();
  return status;
}
