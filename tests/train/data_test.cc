// train/: token datasets (the format, a truncated or corrupt file, a vocabulary larger than the model's), the loader
// (Note [Deterministic batches]: the same token ids for the same global batch on dp 1, 2, 4 and 3 (uneven), across
// a "resume" at another dp size, every training window once per epoch, validation held out) and the lr schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <set>

#include "core/splitmix.h"
#include "placement/layout.h"
#include "tests/error_of.h"
#include "train/loader.h"
#include "train/lr_schedule.h"
#include "train/token_dataset.h"

namespace dt::train {
namespace {

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("dt_train_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string stem(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  static inline int counter_ = 0;
};

std::vector<int64_t> corpus(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int64_t(splitmix64(uint64_t(i)) % uint64_t(vocab));
  return ids;
}

TEST(TokenDataset, RoundTripsInBothWidths) {
  TempDir dir;
  for (int64_t vocab : {300, 70000}) {
    const std::vector<int64_t> ids = corpus(1001, vocab);
    const TokenDatasetInfo w = TokenDataset::write(dir.stem("c" + std::to_string(vocab)), ids, vocab, "bpe.json", 0);
    EXPECT_EQ(w.bytes_per_token, vocab <= 65536 ? 2 : 4);
    auto d = TokenDataset::open(w.bin_path);
    EXPECT_EQ(d->size(), 1001);
    EXPECT_EQ(d->vocab_size(), vocab);
    EXPECT_EQ(d->info().tokenizer, "bpe.json");
    EXPECT_EQ(d->info().eos_token_id, 0);
    std::vector<int64_t> back(ids.size());
    d->read(0, int64_t(ids.size()), back.data());
    EXPECT_EQ(back, ids);
    // Opening by the header works too; a range outside the file is refused.
    EXPECT_EQ(TokenDataset::open(w.header_path)->size(), 1001);
    EXPECT_THROW(d->read(1000, 2, back.data()), InvalidArgument);
    EXPECT_NO_THROW(d->check_vocab(vocab));
    EXPECT_THROW(d->check_vocab(vocab - 1), InvalidArgument);
  }
}

using dt::testing::error_of;

TEST(TokenDataset, BadFilesAreNamed) {
  TempDir dir;
  const TokenDatasetInfo w = TokenDataset::write(dir.stem("c"), corpus(100, 50), 50);
  // Truncated: the header says 100 tokens.
  std::filesystem::resize_file(w.bin_path, 150);
  std::string e = error_of([&] { TokenDataset::open(w.bin_path); });
  EXPECT_NE(e.find("150 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // A corrupt id (0xffff, not below 50): named with its position when read.
  TokenDataset::write(dir.stem("c"), corpus(100, 50), 50);
  {
    std::fstream f(w.bin_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2 * 37);
    const char bad[2] = {char(0xff), char(0xff)};
    f.write(bad, 2);
  }
  auto d = TokenDataset::open(w.bin_path);
  std::vector<int64_t> out(100);
  e = error_of([&] { d->read(0, 100, out.data()); });
  EXPECT_NE(e.find("token 37 is 65535"), std::string::npos) << e;
  // A header that is not one, and a missing header.
  std::ofstream(w.header_path) << "{\"format\": \"something else\"}";
  EXPECT_NE(error_of([&] { TokenDataset::open(w.bin_path); }).find("'format'"), std::string::npos);
  std::filesystem::remove(w.header_path);
  EXPECT_NE(error_of([&] { TokenDataset::open(w.bin_path); }).find("no header"), std::string::npos);
}

TEST(TokenLoader, TheGlobalBatchIsTheSameOnEveryDpSize) {
  TempDir dir;
  const auto ids = corpus(5000, 97);
  auto data = TokenDataset::open(TokenDataset::write(dir.stem("c"), ids, 97).bin_path);
  const LoaderOptions o{.seq = 16, .global_batch = 6, .seed = 11, .validation_fraction = 0.1};
  TokenLoader loader(data, o);
  for (int64_t step : {0, 1, 7, 100, 311}) {
    const Tensor whole = loader.batch(step, 0, o.global_batch);
    ASSERT_EQ(whole.shape(), Shape({6, 17}));
    // Each row is 17 consecutive corpus tokens starting at a multiple of seq.
    for (int64_t r = 0; r < 6; ++r) {
      const int64_t* row = whole.data<int64_t>() + r * 17;
      bool found = false;
      for (int64_t w = 0; w < loader.train_windows() && !found; ++w)
        found = std::equal(row, row + 17, ids.begin() + w * 16);
      EXPECT_TRUE(found) << "step " << step << " row " << r << " is not a training window";
    }
    for (int64_t dp : {1, 2, 3, 4}) {  // 3: rows 2, 2, 2; 4: rows 2, 2, 1, 1 (torch.chunk)
      std::vector<int64_t> joined;
      for (int64_t rank = 0; rank < dp; ++rank) {
        const IndexRange mine = chunk_range(o.global_batch, dp, rank);
        const Tensor part = loader.batch(step, mine.begin, mine.size());
        joined.insert(joined.end(), part.data<int64_t>(), part.data<int64_t>() + part.numel());
      }
      EXPECT_EQ(joined, std::vector<int64_t>(whole.data<int64_t>(), whole.data<int64_t>() + whole.numel()))
          << "step " << step << " on dp " << dp;
    }
  }
  // A resume is a new loader at the next step, on any dp size: the same ids.
  TokenLoader resumed(TokenDataset::open(dir.stem("c") + ".json"), o);
  EXPECT_TRUE(equal(resumed.batch(8, 0, 6), loader.batch(8, 0, 6)));
  // Another seed: another order.
  TokenLoader other(data, {.seq = 16, .global_batch = 6, .seed = 12, .validation_fraction = 0.1});
  EXPECT_FALSE(equal(other.batch(0, 0, 6), loader.batch(0, 0, 6)));
}

TEST(TokenLoader, EveryTrainingWindowOncePerEpochValidationHeldOut) {
  TempDir dir;
  auto data = TokenDataset::open(TokenDataset::write(dir.stem("c"), corpus(2000, 31), 31).bin_path);
  for (int64_t seq : {7, 13, 64}) {
    TokenLoader loader(data, {.seq = seq, .global_batch = 5, .seed = 3, .validation_fraction = 0.2});
    const int64_t n = loader.train_windows(), windows = (2000 - 1) / seq;
    EXPECT_EQ(n + loader.validation_windows(), windows);
    EXPECT_EQ(loader.validation_windows(), std::max<int64_t>(1, int64_t(std::floor(windows * 0.2))));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::set<int64_t> seen;
      for (int64_t p = epoch * n; p < (epoch + 1) * n; ++p) {
        const int64_t w = loader.window_at(p);
        EXPECT_TRUE(w >= 0 && w < n) << "window " << w << " is not a training window";
        seen.insert(w);
      }
      EXPECT_EQ(int64_t(seen.size()), n) << "seq " << seq << " epoch " << epoch;
    }
    EXPECT_NE(loader.window_at(0), loader.window_at(n)) << "epochs in the same order";
    // Validation rows are the held-out windows, in file order.
    const Tensor v = loader.validation_batch(0, 0, 1);
    std::vector<int64_t> first(size_t(seq + 1));
    data->read(n * seq, seq + 1, first.data());
    EXPECT_EQ(std::vector<int64_t>(v.data<int64_t>(), v.data<int64_t>() + seq + 1), first);
  }
  EXPECT_THROW(TokenLoader(data, {.seq = 5000, .global_batch = 1, .seed = 0, .validation_fraction = 0}),
               InvalidArgument);
}

TEST(LrSchedule, EveryKind) {
  using K = LrSchedule::Kind;
  const LrSchedule cosine{K::kWarmupCosine, 1.0, 4, 14, 0.1, 0};
  EXPECT_DOUBLE_EQ(cosine.lr_at(0), 0.25);
  EXPECT_DOUBLE_EQ(cosine.lr_at(3), 1.0);
  EXPECT_DOUBLE_EQ(cosine.lr_at(4), 1.0);
  EXPECT_NEAR(cosine.lr_at(9), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.5)), 1e-12);
  EXPECT_DOUBLE_EQ(cosine.lr_at(14), 0.1);
  EXPECT_DOUBLE_EQ(cosine.lr_at(100), 0.1);
  const LrSchedule linear{K::kLinear, 1.0, 2, 12, 0.0, 0};
  EXPECT_DOUBLE_EQ(linear.lr_at(1), 1.0);
  EXPECT_DOUBLE_EQ(linear.lr_at(7), 0.5);
  EXPECT_DOUBLE_EQ(linear.lr_at(12), 0.0);
  const LrSchedule wsd{K::kWarmupStableDecay, 2.0, 2, 20, 0.2, 5};
  EXPECT_DOUBLE_EQ(wsd.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(wsd.lr_at(14), 2.0);
  EXPECT_DOUBLE_EQ(wsd.lr_at(15), 2.0);
  EXPECT_NEAR(wsd.lr_at(17), 2.0 - 1.8 * 0.4, 1e-12);
  EXPECT_DOUBLE_EQ(wsd.lr_at(25), 0.2);
  const LrSchedule constant{K::kConstant, 0.5, 0, 1, 0, 0};
  EXPECT_DOUBLE_EQ(constant.lr_at(1000), 0.5);
  EXPECT_EQ(LrSchedule::kind_from_name("wsd"), K::kWarmupStableDecay);
  EXPECT_THROW(LrSchedule::kind_from_name("step"), InvalidArgument);
  EXPECT_THROW(cosine.lr_at(-1), InvalidArgument);
}

}  // namespace
}  // namespace dt::train
