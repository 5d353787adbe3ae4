// The data loader of training: deterministic and resumable, the same global batches on any data-parallel size.
//
//   train::TokenLoader loader(train::TokenDataset::open("corpus.bin"), {.seq = 256, .global_batch = 32, .seed = 1});
//   dt::Tensor rows = loader.batch(step, my_rows.begin, my_rows.size());   // [rows, seq + 1] int64
//   // inputs: rows[:, :-1], targets: rows[:, 1:]
//
// Note [Deterministic batches]
// The corpus is cut into windows of seq + 1 tokens at a stride of seq (each window's last token is the next one's
// first, so every token is a target once). The last validation_fraction of the windows (at least one when the
// fraction is positive) are held out for validation, in file order; the others are the training windows. Training
// visits them epoch after epoch, each epoch in the order of a seeded permutation of the training windows: a bijection
// of [0, N) computed per index (a 4-round Feistel network over the next power of two, walking the cycle back into
// [0, N)), so no permutation is stored and any index is found in O(1). Row r of step k's global batch is position
// k * global_batch + r of that endless sequence. So the global batch of step k depends on (seed, k) only: any dp
// size sees the same global batch, each dp rank reads only its rows (a torch.chunk split of the batch), ranks that
// share a dp rank (tp, pp) read the same rows, and the loader's whole position is the step: a resume at another
// world size continues with exactly the next batch.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "train/token_dataset.h"

namespace dt::train {

struct LoaderOptions {
  int64_t seq = 256;               // tokens per input row (a row holds seq + 1: inputs and shifted targets)
  int64_t global_batch = 8;        // rows per step over all dp ranks
  uint64_t seed = 0;               // the order of the training windows
  double validation_fraction = 0;  // of the windows, held out at the end of the corpus
};

class TokenLoader {
 public:
  // InvalidArgument when the corpus holds fewer than seq + 1 tokens or too few windows for one training window.
  TokenLoader(std::shared_ptr<const TokenDataset> data, LoaderOptions options);
  const LoaderOptions& options() const { return o_; }
  int64_t train_windows() const { return train_; }
  int64_t validation_windows() const { return val_; }
  // Rows [row0, row0 + rows) of step `step`'s global batch (step counts from 0): [rows, seq + 1] int64.
  Tensor batch(int64_t step, int64_t row0, int64_t rows) const;
  // The epoch (pass over the training windows) step `step` starts in.
  int64_t epoch_of(int64_t step) const;
  // Rows [row0, row0 + rows) of validation batch `index` (windows in file order, wrapping around).
  Tensor validation_batch(int64_t index, int64_t row0, int64_t rows) const;
  // The training window at position p of the endless epoch sequence (for tests).
  int64_t window_at(int64_t p) const;

 private:
  Tensor rows_of(const std::vector<int64_t>& windows) const;
  std::shared_ptr<const TokenDataset> data_;
  LoaderOptions o_;
  int64_t train_ = 0, val_ = 0;
};

}  // namespace dt::train
