// Reading the part of a stored tensor that overlaps a block, with every page checksum verified before the bytes are
// used (Note [Checkpoint layout]). One Reader per load: it keeps the files open and counts the bytes it read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dtensor/checkpoint/file_io.h"
#include "dtensor/checkpoint/index.h"

namespace dt::checkpoint {

class Reader {
 public:
  explicit Reader(const Index& index) : index_(index) {}
  // Fills dst, the row-major block `box` of tensor t (host memory, t's dtype), from the chunks that overlap it.
  // Reads only the overlapping byte ranges, widened to whole pages when the chunk has checksums.
  void read_block(const StoredTensor& t, const Box& box, void* dst);
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  const File& file(const std::string& name);
  void read_chunk_part(const StoredTensor& t, const StoredChunk& c, const Box& part, const Box& box, char* dst);

  // Checks pages [first, first + count) of chunk c held at data (InvalidArgument naming the tensor and file).
  void check_pages(const StoredTensor& t, const StoredChunk& c, const char* data, uint64_t first_page, uint64_t n);

  const Index& index_;
  std::map<std::string, File> files_;
  uint64_t bytes_read_ = 0;
  std::vector<char> page_;      // one page read whole for a run that covers part of it (made on first use)
  std::vector<uint32_t> crcs_;  // scratch of check_pages
};

}  // namespace dt::checkpoint
