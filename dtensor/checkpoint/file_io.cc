#include "dtensor/checkpoint/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace dt::checkpoint {
namespace {

[[noreturn]] void fail(const std::string& op, const std::string& path, int err) {
  DT_THROW(SystemError, "checkpoint: ", op, " '", path, "' failed: ", std::strerror(err));
}

void sync_dir(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open folder", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync folder", dir, err);
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

File::File(const std::string& path, Mode mode) : path_(path) {
  int flags = O_CLOEXEC;
  if (mode == Mode::kRead) flags |= O_RDONLY;
  if (mode == Mode::kCreate) flags |= O_WRONLY | O_CREAT | O_TRUNC;
  if (mode == Mode::kWrite) flags |= O_WRONLY;
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) {
    if (errno == ENOENT && mode != Mode::kCreate) DT_THROW(InvalidArgument, "checkpoint: file '", path, "' is missing");
    fail("open", path, errno);
  }
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("stat", path_, errno);
  return uint64_t(st.st_size);
}

void File::read_at(void* dst, size_t n, uint64_t offset, const std::string& what) const {
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, p + done, n - done, off_t(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("read", path_, errno);
    }
    if (got == 0)
      DT_THROW(InvalidArgument, "checkpoint: file '", path_, "' is truncated: ", what.empty() ? "" : what + " needs ",
               "bytes [", offset, ", ", offset + n, ") but the file has ", offset + done, " bytes");
    done += size_t(got);
  }
}

void File::write_at(const void* src, size_t n, uint64_t offset) {
  const auto* p = static_cast<const char*>(src);
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::pwrite(fd_, p + done, n - done, off_t(offset + done));
    if (put < 0) {
      if (errno == EINTR) continue;
      fail("write", path_, errno);
    }
    done += size_t(put);
  }
}

void File::truncate(uint64_t size) {
  if (::ftruncate(fd_, off_t(size)) != 0) fail("resize", path_, errno);
}

void File::start_writeback(uint64_t offset, size_t n) {
#if defined(__linux__)
  (void)::sync_file_range(fd_, off_t(offset), off_t(n), SYNC_FILE_RANGE_WRITE);
#else
  (void)offset;
  (void)n;
#endif
}

void File::sync() {
  if (::fsync(fd_) != 0) fail("fsync", path_, errno);
}

void File::close() {
  if (fd_ < 0) return;
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("close", path_, errno);
}

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string part = dir.substr(0, pos);
    if (part.empty() || part == "/") continue;
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) fail("create folder", part, errno);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    DT_THROW(InvalidArgument, "checkpoint: '", dir, "' exists and is not a folder");
}

void durable_rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail("rename to '" + to + "' of", from, errno);
  sync_dir(parent_of(to));
}

void write_file_atomically(const std::string& path, const std::string& bytes, bool durable) {
  const std::string tmp = path + ".tmp";
  {
    File f(tmp, File::Mode::kCreate);
    f.write_at(bytes.data(), bytes.size(), 0);
    if (durable) f.sync();
    f.close();
  }
  if (durable) {
    durable_rename(tmp, path);
  } else if (::rename(tmp.c_str(), path.c_str()) != 0) {
    fail("rename to '" + path + "' of", tmp, errno);
  }
}

std::string read_whole_file(const std::string& path) {
  File f(path, File::Mode::kRead);
  std::string bytes(f.size(), '\0');
  f.read_at(bytes.data(), bytes.size(), 0);
  return bytes;
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) fail("remove", path, errno);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace dt::checkpoint
