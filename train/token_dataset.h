// Token datasets: the token ids of a corpus as one flat file (uint16 or uint32, little-endian, nanoGPT's .bin, so
// that tools reading those read it) beside a small JSON header, memory-mapped.
//
//   corpus.bin    the ids, one after another, nothing else
//   corpus.json   {"format": "dtensor-tokens", "version": 1, "dtype": "uint16", "tokens": 1234567,
//                  "vocab_size": 50257, "tokenizer": "tokenizer.json", "eos_token_id": 0, "source": "..."}
//
// tools/prepare_tokens.py writes them from text files (Hugging Face `tokenizers`: a given tokenizer.json, or a
// byte-level BPE trained on the corpus). open() checks the header against the file (its size must be exactly tokens
// ids of dtype: a truncated or padded file is refused, naming it); read() checks every id it returns against
// vocab_size (a corrupt id names the file and the position). Reading needs no lock: many threads and ranks read one
// dataset at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dt::train {

struct TokenDatasetInfo {
  std::string bin_path, header_path;
  int bytes_per_token = 2;  // 2 (uint16) or 4 (uint32)
  int64_t tokens = 0;
  int64_t vocab_size = 0;
  std::string tokenizer;  // a path (relative to the header's folder) or a name; may be empty
  std::optional<int64_t> eos_token_id;
  std::string source;  // where the text came from (free text)
};

class TokenDataset {
 public:
  // `path`: the .bin or the .json (the other is found beside it, same stem). InvalidArgument naming the file for a
  // missing or malformed header, an unknown dtype, or a .bin whose size is not tokens * bytes_per_token.
  static std::shared_ptr<const TokenDataset> open(const std::string& path);
  ~TokenDataset();
  TokenDataset(const TokenDataset&) = delete;
  TokenDataset& operator=(const TokenDataset&) = delete;

  const TokenDatasetInfo& info() const { return info_; }
  int64_t size() const { return info_.tokens; }
  int64_t vocab_size() const { return info_.vocab_size; }
  // Tokens [begin, begin + n) as int64 into out; InvalidArgument for a range outside the file or an id >= vocab_size
  // (naming the file and the position).
  void read(int64_t begin, int64_t n, int64_t* out) const;
  // Refuses (InvalidArgument, before training starts) a dataset whose vocabulary is larger than the model's.
  void check_vocab(int64_t model_vocab) const;

  // Writes `ids` as a dataset at `stem`.bin / `stem`.json (uint16 when every id and vocab_size fit, else uint32),
  // each file complete or absent (temporary name, then rename). For tests and programs; tools/prepare_tokens.py
  // writes the same format from Python.
  static TokenDatasetInfo write(const std::string& stem, const std::vector<int64_t>& ids, int64_t vocab_size,
                                const std::string& tokenizer = "", std::optional<int64_t> eos_token_id = std::nullopt,
                                const std::string& source = "");

 private:
  TokenDataset() = default;
  TokenDatasetInfo info_;
  const unsigned char* data_ = nullptr;
  size_t mapped_ = 0;
};

}  // namespace dt::train
