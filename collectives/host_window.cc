// HostWindow (collectives/host_window.h; Note [Shared host memory] there).
#include "collectives/host_window.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>

#include "collectives/exchange.h"
#include "core/error.h"

namespace dt {

namespace {

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The descriptors create() holds: closed on every way out (a peer's death fails the exchanges with an exception).
struct Descriptors {
  std::vector<int> fds;
  ~Descriptors() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
};

std::string memfd_name(uint64_t tag) {
  char name[64];
  std::snprintf(name, sizeof(name), "dtensor-window-%016llx", static_cast<unsigned long long>(tag));
  return name;
}

// Opens rank r's memfd through /proc when its link names the memfd r published; -1 otherwise.
int open_peer(int64_t pid, int64_t fd, uint64_t tag, int64_t bytes) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  char link[256];
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0) return -1;
  link[n] = 0;
  if (std::string(link).rfind("/memfd:" + memfd_name(tag), 0) != 0) return -1;
  const int peer = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (peer < 0) return -1;
  struct stat st;
  if (fstat(peer, &st) != 0 || st.st_size != bytes) {
    close(peer);
    return -1;
  }
  return peer;
}

}  // namespace

int64_t HostWindow::page_bytes() {
  static const int64_t page = sysconf(_SC_PAGESIZE) > 0 ? int64_t(sysconf(_SC_PAGESIZE)) : 4096;
  return page;
}

std::shared_ptr<HostWindow> HostWindow::create(Communicator& comm, int64_t bytes, const std::vector<RangeSpec>& ranges,
                                               bool enable) {
  const int64_t page = page_bytes();
  const int size = comm.size(), me = comm.rank();
  const int64_t window_bytes = round_up(std::max<int64_t>(bytes, 1), page);
  for (size_t k = 0; k < ranges.size(); ++k) {
    for (const Piece& p : ranges[k].pieces) {
      DT_CHECK_ARG(p.rank >= 0 && p.rank < size && p.offset >= 0 && p.bytes >= 0 && p.at >= 0 && p.offset % page == 0 &&
                       p.at % page == 0 && p.at + p.bytes <= ranges[k].bytes &&
                       p.offset + round_up(p.bytes, page) <= window_bytes,
                   "HostWindow: range ", k, " has a piece (rank ", p.rank, ", offset ", p.offset, ", bytes ", p.bytes,
                   ", at ", p.at, ") outside the ", size, " ranks, its range of ", ranges[k].bytes,
                   " bytes, the window of ", window_bytes, " bytes or the ", page, "-byte pages");
    }
  }
  const uint64_t tag = (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::random_device{}());
  // fds[r]: rank r's window, this rank's own included (the mappings keep the files once they are closed).
  Descriptors open_fds{std::vector<int>(size_t(size), -1)};
  std::vector<int>& fds = open_fds.fds;
  int& fd = fds[size_t(me)];
  void* local = MAP_FAILED;
  if (enable) {
    fd = memfd_create(memfd_name(tag).c_str(), MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, window_bytes) == 0)
      local = mmap(nullptr, size_t(window_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  auto window = std::make_shared<HostWindow>(Key{}, local == MAP_FAILED ? nullptr : static_cast<uint8_t*>(local),
                                             local == MAP_FAILED ? 0 : window_bytes);
  const std::vector<int64_t> all =
      all_gather_ints(comm, {window->local_ != nullptr, int64_t(getpid()), fd, int64_t(tag), window_bytes});
  bool ok = true;
  for (int r = 0; r < size; ++r) ok = ok && all[size_t(r) * 5] == 1;
  for (int r = 0; ok && r < size; ++r) {
    const int64_t* e = &all[size_t(r) * 5];
    if (r != me) fds[size_t(r)] = open_peer(e[1], e[2], uint64_t(e[3]), e[4]);
    ok = fds[size_t(r)] >= 0;
  }
  // Every rank has opened every window (or failed to) before any closes its own descriptor, which /proc names.
  for (int64_t v : all_gather_ints(comm, {int64_t(ok)})) ok = ok && v == 1;
  for (size_t k = 0; ok && k < ranges.size(); ++k) {
    const int64_t reserved = round_up(std::max<int64_t>(ranges[k].bytes, 1), page);
    void* base = mmap(nullptr, size_t(reserved), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      ok = false;
      break;
    }
    window->ranges_.emplace_back(static_cast<uint8_t*>(base), reserved);
    for (const Piece& p : ranges[k].pieces) {
      if (p.bytes == 0) continue;
      void* at = mmap(static_cast<uint8_t*>(base) + p.at, size_t(round_up(p.bytes, page)), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_FIXED | MAP_POPULATE, fds[size_t(p.rank)], p.offset);
      ok = ok && at != MAP_FAILED;
    }
  }
  for (int& f : fds) {
    if (f >= 0) close(f);
    f = -1;
  }
  const std::vector<int64_t> oks = all_gather_ints(comm, {int64_t(ok)});
  for (int64_t v : oks) ok = ok && v == 1;
  if (!ok) return nullptr;  // the destructor unmaps what was mapped
  return window;
}

HostWindow::~HostWindow() {
  for (const auto& [base, reserved] : ranges_) munmap(base, size_t(reserved));
  if (local_) munmap(local_, size_t(bytes_));
}

}  // namespace dt
