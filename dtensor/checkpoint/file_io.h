// Files for checkpoints: whole reads and writes at offsets, durable renames. Every failure is a dt::SystemError
// naming the file and the operation (with errno's text), or an InvalidArgument for a file that is shorter than the
// index says (truncated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dt::checkpoint {

class File {
 public:
  enum class Mode { kRead, kCreate /* write-only, truncated */, kWrite /* existing, write-only */ };
  File() = default;
  File(const std::string& path, Mode mode);
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const;
  // Reads exactly n bytes at `offset` (InvalidArgument "truncated" when the file ends first; `what` names the
  // tensor or part being read, for the message).
  void read_at(void* dst, size_t n, uint64_t offset, const std::string& what = "") const;
  void write_at(const void* src, size_t n, uint64_t offset);
  void truncate(uint64_t size);
  // Asks the kernel to start writing [offset, offset + n) to the disk now (Linux: sync_file_range; elsewhere
  // nothing), so that the disk works while the next bytes are prepared and a later sync() waits for less. A hint:
  // failures are ignored (sync() reports real ones).
  void start_writeback(uint64_t offset, size_t n);
  void sync();
  void close();

 private:
  int fd_ = -1;
  std::string path_;
};

// Creates dir and its parents (existing ones are fine).
void make_dirs(const std::string& dir);
// rename(2) from -> to, then fsync of the folder so the new name survives a crash.
void durable_rename(const std::string& from, const std::string& to);
// Writes `bytes` to path + ".tmp", fsyncs, and renames it to path (durable_rename): readers see the old file or the
// whole new one. durable = false: the same without either fsync (whole or absent for readers, not crash-safe).
void write_file_atomically(const std::string& path, const std::string& bytes, bool durable = true);
std::string read_whole_file(const std::string& path);
bool file_exists(const std::string& path);
// The names (not paths) of the entries of a folder; empty when it does not exist.
std::vector<std::string> list_dir(const std::string& dir);
void remove_file(const std::string& path);  // a missing file is fine
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace dt::checkpoint
