// The data loader (train/loader.h, Note [Deterministic batches]).
#include "train/loader.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/splitmix.h"

namespace dt::train {
namespace {

// A bijection of [0, n) keyed by (seed, epoch): a 4-round Feistel network on the smallest even power of two >= n,
// cycle-walking values >= n back into range (each walk ends: the network is a permutation of the larger domain).
int64_t permute(int64_t x, int64_t n, uint64_t seed, int64_t epoch) {
  if (n <= 1) return 0;
  int bits = 2;
  while ((int64_t(1) << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  const uint64_t key = splitmix64(seed ^ splitmix64(uint64_t(epoch) + 0x5851f42d4c957f2dull));
  uint64_t v = uint64_t(x);
  do {
    uint64_t l = v >> half, r = v & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = splitmix64(key ^ (round << 56) ^ r) & mask;
      const uint64_t t = l ^ f;
      l = r;
      r = t;
    }
    v = (l << half) | r;
  } while (v >= uint64_t(n));
  return int64_t(v);
}

}  // namespace

TokenLoader::TokenLoader(std::shared_ptr<const TokenDataset> data, LoaderOptions o) : data_(std::move(data)), o_(o) {
  DT_CHECK_ARG(data_ != nullptr, "TokenLoader: no dataset");
  DT_CHECK_ARG(o_.seq > 0 && o_.global_batch > 0 && o_.validation_fraction >= 0 && o_.validation_fraction < 1,
               "TokenLoader: seq ", o_.seq, " and global_batch ", o_.global_batch,
               " must be positive and validation_fraction ", o_.validation_fraction, " in [0, 1)");
  const int64_t windows = data_->size() > o_.seq ? (data_->size() - 1) / o_.seq : 0;
  val_ = o_.validation_fraction > 0
             ? std::max<int64_t>(1, int64_t(std::floor(double(windows) * o_.validation_fraction)))
             : 0;
  train_ = windows - val_;
  DT_CHECK_ARG(train_ >= 1, "TokenLoader: '", data_->info().bin_path, "' holds ", data_->size(), " tokens: ", windows,
               " window(s) of ", o_.seq + 1, " tokens, ", val_,
               " held out for validation, none left to train on (a shorter seq or a larger corpus)");
}

int64_t TokenLoader::window_at(int64_t p) const {
  DT_CHECK_ARG(p >= 0, "TokenLoader: negative position ", p);
  return permute(p % train_, train_, o_.seed, p / train_);
}

int64_t TokenLoader::epoch_of(int64_t step) const { return step * o_.global_batch / train_; }

Tensor TokenLoader::rows_of(const std::vector<int64_t>& windows) const {
  const int64_t width = o_.seq + 1;
  Tensor out = Tensor::empty({int64_t(windows.size()), width}, DType::i64);
  for (size_t r = 0; r < windows.size(); ++r)
    data_->read(windows[r] * o_.seq, width, out.data<int64_t>() + int64_t(r) * width);
  return out;
}

Tensor TokenLoader::batch(int64_t step, int64_t row0, int64_t rows) const {
  DT_CHECK_ARG(step >= 0 && row0 >= 0 && rows >= 0 && row0 + rows <= o_.global_batch, "TokenLoader::batch: rows [",
               row0, ", ", row0 + rows, ") of step ", step, " outside a global batch of ", o_.global_batch);
  std::vector<int64_t> windows;
  for (int64_t r = row0; r < row0 + rows; ++r) windows.push_back(window_at(step * o_.global_batch + r));
  return rows_of(windows);
}

Tensor TokenLoader::validation_batch(int64_t index, int64_t row0, int64_t rows) const {
  DT_CHECK_ARG(val_ > 0, "TokenLoader: no validation windows (validation_fraction is 0)");
  DT_CHECK_ARG(index >= 0 && row0 >= 0 && rows >= 0, "TokenLoader::validation_batch: bad index or rows");
  std::vector<int64_t> windows;
  for (int64_t r = row0; r < row0 + rows; ++r) windows.push_back(train_ + (index * o_.global_batch + r) % val_);
  return rows_of(windows);
}

}  // namespace dt::train
