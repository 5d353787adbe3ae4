// Text generation from a Gpt (nn/models/gpt.h), on any mesh the model was parallelized on: batched prompts of
// different lengths (left-padded), a KV cache per layer laid out like the layer's keys and values (sharded over tp
// by key/value heads, replicated over dp), allocated once, prefill then one decode step per token.
//
//   nn::GenerateResult r = nn::generate(*model, mesh["tp"], {{1, 15043, 29892}, {1, 450}}, {.max_new_tokens = 64});
//   r.tokens[0];                       // the new tokens of the first prompt
//   r.time_to_first_token_seconds;     // prefill + the first token
//
// Every rank of the model's mesh calls it with the same prompts and options and gets the same tokens. Sampling
// draws one uniform number per (seed, step, row) from splitmix64 and picks by inverse CDF over the full-vocabulary
// probabilities, so a seed gives the same tokens on any mesh (up to ties in the logits' last bits).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/models/gpt.h"

namespace dt::nn {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0;  // 0: greedy (the first maximum); > 0: sample from softmax(logits / temperature)
  int64_t top_k = 0;       // sampling: keep the k most likely tokens (0: all)
  double top_p = 1.0;      // sampling: keep the smallest set whose probability reaches top_p (1: all)
  uint64_t seed = 0;
  std::vector<int64_t> stop_tokens;  // a row ends after producing one (it is kept in its tokens)
  int64_t pad_token = 0;             // fed where a row is padding or has ended (always masked)
  // Called after each step on every rank with the tokens just chosen (one per row; finished rows repeat pad_token).
  std::function<void(int64_t step, const std::vector<int64_t>& tokens)> on_step;
};

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // per prompt: the new tokens
  double prefill_seconds = 0;
  double time_to_first_token_seconds = 0;  // prefill and choosing the first token
  double decode_seconds = 0;               // the steps after the first token
  int64_t decode_steps = 0;
  double decode_tokens_per_second() const;  // tokens of all rows per second of decode
};

// `mesh` is the one the model takes its input on (token ids are Replicate there): the mesh parallelize_module
// used (mesh["tp"]), or the mesh the model was materialized on when it is not tensor-parallel (FSDP's own dims
// are not part of it).
GenerateResult generate(Gpt& model, const DeviceMesh& mesh, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options = {});

// The next token of one row from its logits (vocab floats) under the options, with `u` uniform in [0, 1) (sampling
// only): what generate does per row, exposed for tests.
int64_t choose_token(const float* logits, int64_t vocab, const GenerateOptions& options, double u);

}  // namespace dt::nn
