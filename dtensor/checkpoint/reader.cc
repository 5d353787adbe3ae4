#include "dtensor/checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"

namespace dt::checkpoint {
namespace {

// Direct reads go straight into the destination in windows of this size, checked while still in cache.
constexpr uint64_t kWindowBytes = uint64_t(1) << 20;

struct Run {
  uint64_t src;  // byte offset within the chunk
  uint64_t len;
  char* dst;
};

}  // namespace

const File& Reader::file(const std::string& name) {
  auto it = files_.find(name);
  if (it != files_.end()) return it->second;
  File f(join_path(index_.dir, name), File::Mode::kRead);
  const auto want = index_.file_bytes.find(name);
  DT_ASSERT(want != index_.file_bytes.end(), "chunk file not listed: ", name);
  const uint64_t have = f.size();
  if (have != want->second)
    DT_THROW(InvalidArgument, "checkpoint: file '", f.path(), "' has ", have, " bytes but the index '", index_.path,
             "' says ", want->second, have < want->second ? " (truncated)" : " (damaged)");
  return files_.emplace(name, std::move(f)).first->second;
}

void Reader::read_block(const StoredTensor& t, const Box& box, void* dst) {
  if (box.numel() == 0) return;
  for (const StoredChunk& c : t.chunks)
    if (const auto part = intersect(c.box, box)) read_chunk_part(t, c, *part, box, static_cast<char*>(dst));
}

void Reader::check_pages(const StoredTensor& t, const StoredChunk& c, const char* data, uint64_t first_page,
                         uint64_t n) {
  const uint64_t P = index_.page_bytes;
  crcs_.resize(page_count(n, P));
  crc32c_pages(data, n, P, crcs_.data());
  for (size_t i = 0; i < crcs_.size(); ++i)
    if (crcs_[i] != c.page_crcs[first_page + i])
      DT_THROW(InvalidArgument, "checkpoint: tensor '", t.name, "' in file '", join_path(index_.dir, c.file),
               "' fails its checksum at bytes [", c.begin + (first_page + i) * P, ", ",
               c.begin + std::min((first_page + i + 1) * P, c.bytes), "): the file is damaged");
}

void Reader::read_chunk_part(const StoredTensor& t, const StoredChunk& c, const Box& part, const Box& box, char* dst) {
  const uint64_t es = dtype_size(t.dtype);
  std::vector<Run> runs;
  for_each_run(part, c.box, box, [&](int64_t s, int64_t d, int64_t len) {
    runs.push_back({uint64_t(s) * es, uint64_t(len) * es, dst + uint64_t(d) * es});
  });
  const File& f = file(c.file);
  const std::string what = "tensor '" + t.name + "'";
  if (c.page_crcs.empty()) {  // no checksums: exactly the runs
    for (const Run& r : runs) f.read_at(r.dst, r.len, c.begin + r.src, what);
    for (const Run& r : runs) bytes_read_ += r.len;
    return;
  }
  const uint64_t P = index_.page_bytes;
  uint64_t cached = UINT64_MAX;  // the page of this chunk held in page_
  for (const Run& r : runs) {
    uint64_t pos = r.src;
    const uint64_t end = r.src + r.len;
    while (pos < end) {
      const uint64_t pg = pos / P;
      const uint64_t pstart = pg * P;
      const uint64_t pend = std::min(pstart + P, c.bytes);
      if (pos == pstart && end >= pend) {
        // Whole pages from here: read them straight into the destination, then check them there.
        uint64_t stop = end == c.bytes ? end : end / P * P;
        stop = std::min(stop, pos + std::max<uint64_t>(1, kWindowBytes / P) * P);
        char* out = r.dst + (pos - r.src);
        f.read_at(out, stop - pos, c.begin + pos, what);
        check_pages(t, c, out, pg, stop - pos);
        bytes_read_ += stop - pos;
        pos = stop;
        continue;
      }
      if (cached != pg) {
        page_.resize(P);
        f.read_at(page_.data(), pend - pstart, c.begin + pstart, what);
        check_pages(t, c, page_.data(), pg, pend - pstart);
        bytes_read_ += pend - pstart;
        cached = pg;
      }
      const uint64_t take = std::min(end, pend) - pos;
      std::memcpy(r.dst + (pos - r.src), page_.data() + (pos - pstart), take);
      pos += take;
    }
  }
}

}  // namespace dt::checkpoint
