// Token datasets (train/token_dataset.h).
#include "train/token_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "dtensor/checkpoint/file_io.h"

namespace dt::train {
namespace {

namespace json = boost::json;
constexpr const char* kFormat = "dtensor-tokens";

std::string stem_of(const std::string& path) {
  for (const char* ext : {".bin", ".json"}) {
    const std::string e(ext);
    if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0)
      return path.substr(0, path.size() - e.size());
  }
  return path;
}

int64_t count_of(const json::object& o, const char* key, const std::string& file) {
  const json::value* v = o.if_contains(key);
  DT_CHECK_ARG(v != nullptr && (v->is_int64() || v->is_uint64()), "token dataset header '", file, "': '", key,
               "' must be a non-negative integer");
  const int64_t n = v->is_int64() ? v->get_int64() : int64_t(v->get_uint64());
  DT_CHECK_ARG(n >= 0, "token dataset header '", file, "': '", key, "' must be a non-negative integer, got ", n);
  return n;
}

}  // namespace

std::shared_ptr<const TokenDataset> TokenDataset::open(const std::string& path) {
  const std::string stem = stem_of(path);
  std::shared_ptr<TokenDataset> d(new TokenDataset());
  TokenDatasetInfo& info = d->info_;
  info.bin_path = stem + ".bin";
  info.header_path = stem + ".json";
  DT_CHECK_ARG(checkpoint::file_exists(info.header_path), "token dataset '", path, "': no header ", info.header_path,
               " (tools/prepare_tokens.py writes the .bin and its .json)");
  std::error_code ec;
  json::value v = json::parse(checkpoint::read_whole_file(info.header_path), ec);
  DT_CHECK_ARG(!ec && v.is_object(), "token dataset header '", info.header_path, "' is not a JSON object");
  const json::object& o = v.get_object();
  const json::value* format = o.if_contains("format");
  DT_CHECK_ARG(format && format->is_string() && format->get_string() == kFormat, "token dataset header '",
               info.header_path, "': 'format' must be \"", kFormat, "\"");
  const json::value* dtype = o.if_contains("dtype");
  DT_CHECK_ARG(dtype && dtype->is_string() && (dtype->get_string() == "uint16" || dtype->get_string() == "uint32"),
               "token dataset header '", info.header_path, "': 'dtype' must be \"uint16\" or \"uint32\"");
  info.bytes_per_token = dtype->get_string() == "uint16" ? 2 : 4;
  info.tokens = count_of(o, "tokens", info.header_path);
  info.vocab_size = count_of(o, "vocab_size", info.header_path);
  DT_CHECK_ARG(info.vocab_size > 0, "token dataset header '", info.header_path, "': 'vocab_size' must be positive");
  if (const json::value* t = o.if_contains("tokenizer"); t && t->is_string()) info.tokenizer = t->get_string();
  if (const json::value* s = o.if_contains("source"); s && s->is_string()) info.source = s->get_string();
  if (const json::value* e = o.if_contains("eos_token_id"); e && !e->is_null())
    info.eos_token_id = count_of(o, "eos_token_id", info.header_path);

  const int fd = ::open(info.bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  DT_CHECK_ARG(fd >= 0, "token dataset '", info.bin_path, "' cannot be opened: ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const uint64_t want = uint64_t(info.tokens) * uint64_t(info.bytes_per_token);
  if (!stat_ok || uint64_t(st.st_size) != want) {
    ::close(fd);
    DT_THROW(InvalidArgument, "token dataset '", info.bin_path, "' holds ", stat_ok ? int64_t(st.st_size) : -1,
             " bytes but its header says ", info.tokens, " tokens of ", info.bytes_per_token, " bytes (", want,
             "): truncated or not the file the header describes");
  }
  if (want > 0) {
    void* p = ::mmap(nullptr, size_t(want), PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      DT_THROW(SystemError, "token dataset '", info.bin_path, "': mmap failed: ", std::strerror(err));
    d->data_ = static_cast<const unsigned char*>(p);
    d->mapped_ = size_t(want);
  } else {
    ::close(fd);
  }
  return d;
}

TokenDataset::~TokenDataset() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), mapped_);
}

void TokenDataset::read(int64_t begin, int64_t n, int64_t* out) const {
  DT_CHECK_ARG(begin >= 0 && n >= 0 && begin + n <= info_.tokens, "token dataset '", info_.bin_path, "': tokens [",
               begin, ", ", begin + n, ") are outside its ", info_.tokens);
  const int64_t vocab = info_.vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char* p = data_ + size_t(begin + i) * size_t(info_.bytes_per_token);
    uint32_t id = uint32_t(p[0]) | (uint32_t(p[1]) << 8);
    if (info_.bytes_per_token == 4) id |= (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
    DT_CHECK_ARG(int64_t(id) < vocab, "token dataset '", info_.bin_path, "': token ", begin + i, " is ", id,
                 ", not below the vocabulary size ", vocab, " (a corrupt file, or a header from another file)");
    out[i] = int64_t(id);
  }
}

void TokenDataset::check_vocab(int64_t model_vocab) const {
  DT_CHECK_ARG(info_.vocab_size <= model_vocab, "token dataset '", info_.header_path, "' has a vocabulary of ",
               info_.vocab_size, " tokens, larger than the model's ", model_vocab,
               " (tokenize with the model's tokenizer, or give the model a larger vocabulary)");
}

TokenDatasetInfo TokenDataset::write(const std::string& stem, const std::vector<int64_t>& ids, int64_t vocab_size,
                                     const std::string& tokenizer, std::optional<int64_t> eos_token_id,
                                     const std::string& source) {
  DT_CHECK_ARG(vocab_size > 0 && vocab_size <= (int64_t(1) << 32), "TokenDataset::write: vocab_size ", vocab_size,
               " must be in [1, 2^32]");
  const int width = vocab_size <= 65536 ? 2 : 4;
  std::string bytes(ids.size() * size_t(width), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    DT_CHECK_ARG(ids[i] >= 0 && ids[i] < vocab_size, "TokenDataset::write: id ", ids[i], " at ", i,
                 " is outside the vocabulary [0, ", vocab_size, ")");
    for (int b = 0; b < width; ++b) bytes[i * size_t(width) + size_t(b)] = char((uint64_t(ids[i]) >> (8 * b)) & 0xff);
  }
  TokenDatasetInfo info;
  info.bin_path = stem + ".bin";
  info.header_path = stem + ".json";
  info.bytes_per_token = width;
  info.tokens = int64_t(ids.size());
  info.vocab_size = vocab_size;
  info.tokenizer = tokenizer;
  info.eos_token_id = eos_token_id;
  info.source = source;
  json::object o{{"format", kFormat},
                 {"version", 1},
                 {"dtype", width == 2 ? "uint16" : "uint32"},
                 {"tokens", info.tokens},
                 {"vocab_size", vocab_size},
                 {"tokenizer", tokenizer},
                 {"source", source}};
  o["eos_token_id"] = eos_token_id ? json::value(*eos_token_id) : json::value(nullptr);
  checkpoint::write_file_atomically(info.bin_path, bytes);
  checkpoint::write_file_atomically(info.header_path, json::serialize(o) + "\n");
  return info;
}

}  // namespace dt::train
