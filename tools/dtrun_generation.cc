#include "tools/dtrun_generation.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/error_file.h"

namespace dt::dtrun {

namespace {

using Clock = std::chrono::steady_clock;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by " + signal_name(WTERMSIG(status)) + (WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Writes all of `s`; gives up silently when the output is gone (EPIPE).
void write_fd(int fd, const std::string& s) {
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= static_cast<size_t>(k);
  }
}

struct Stream {
  int fd = -1;
  int out_fd = 1;  // where its lines go
  std::string pending;
};

struct Child {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool alive = false;
  bool hung = false;  // still running when the failure grace ran out
  int status = 0;
  Stream out, err;
};

class Generation {
 public:
  Generation(const LaunchOptions& o, const GenerationSpec& spec) : o_(o), spec_(spec) {}
  GenerationEnd run(int signal_fd, const std::function<std::string()>& stop_wanted);

 private:
  void spawn(int local_rank);
  std::string error_file(int local_rank) const {
    return spec_.error_dir + "/" + std::to_string(local_rank) + "/error.json";
  }
  void on_signal(int sig);
  void reap();
  void name_first_failure();
  static constexpr std::chrono::milliseconds kFailureSettle{200};
  void begin_stop(int sig);
  void signal_alive(int sig);
  void pump(Stream& s, int rank);
  void emit_lines(Stream& s, int rank, bool flush_all);
  bool any_alive() const {
    return std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.alive; });
  }
  std::string alive_names() const {
    std::string names;
    for (const Child& c : children_)
      if (c.alive) names += (names.empty() ? "" : ", ") + std::to_string(c.rank);
    return names;
  }

  const LaunchOptions& o_;
  const GenerationSpec& spec_;
  std::vector<Child> children_;
  bool stopping_ = false;
  bool resizing_ = false;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> settle_at_;  // Note [The first failure]
  std::vector<int> failed_;                     // failures reaped before settle_at_ (indices into children_)
  std::optional<Clock::time_point> stop_at_;    // a rank failed: the others are stopped then unless gone by then
  int received_signal_ = 0;
  int first_failure_ = -1;  // index into children_ of the first rank that failed on its own
  std::vector<int> stopped_ranks_;
};

void Generation::spawn(int local_rank) {
  Child c;
  c.local_rank = local_rank;
  c.rank = spec_.first_rank + local_rank;
  const int local_world = static_cast<int>(spec_.slots.size());
  std::vector<std::string> env = o_.base_env;
  auto add = [&](const char* k, const std::string& v) { env.push_back(std::string(k) + "=" + v); };
  add("DT_RANK", std::to_string(c.rank));
  add("DT_WORLD_SIZE", std::to_string(spec_.world_size));
  add("DT_LOCAL_RANK", std::to_string(local_rank));
  add("DT_LOCAL_WORLD_SIZE", std::to_string(local_world));
  add("DT_NODE_RANK", std::to_string(spec_.node_rank));
  add("DT_SLOT", std::to_string(spec_.slots[size_t(local_rank)]));
  add("DT_MASTER_ADDR", spec_.master_addr);
  add("DT_MASTER_PORT", std::to_string(spec_.store_port));
  add("DT_STORE_SECRET", spec_.secret);
  add("DT_STORE_HOSTED", "1");
  add("DT_RESTART_COUNT", std::to_string(spec_.restart_count));
  add("DT_MAX_RESTARTS", std::to_string(spec_.max_restarts));
  if (!o_.timeout.empty()) add("DT_TIMEOUT_S", o_.timeout);
  // torchrun's environment, for programs that read it (torch.distributed's env:// included): the same ranks; its
  // MASTER_PORT is a port of its own, free for rank 0 of a PyTorch program to host torch's store on.
  add("RANK", std::to_string(c.rank));
  add("WORLD_SIZE", std::to_string(spec_.world_size));
  add("LOCAL_RANK", std::to_string(local_rank));
  add("LOCAL_WORLD_SIZE", std::to_string(local_world));
  add("GROUP_RANK", std::to_string(spec_.node_rank));
  add("GROUP_WORLD_SIZE", std::to_string(spec_.nnodes));
  add("ROLE_RANK", std::to_string(c.rank));
  add("ROLE_WORLD_SIZE", std::to_string(spec_.world_size));
  add("ROLE_NAME", "default");
  add("MASTER_ADDR", spec_.master_addr);
  add("MASTER_PORT", std::to_string(spec_.torch_master_port));
  add("TORCHELASTIC_RESTART_COUNT", std::to_string(spec_.restart_count));
  add("TORCHELASTIC_MAX_RESTARTS", std::to_string(spec_.max_restarts));
  add("TORCHELASTIC_RUN_ID", spec_.run_id);
  const std::string error_path = error_file(local_rank);
  ::mkdir((spec_.error_dir + "/" + std::to_string(local_rank)).c_str(), 0700);
  ::unlink(error_path.c_str());
  add("TORCHELASTIC_ERROR_FILE", error_path);

  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> program = o_.program;
  for (auto& a : program) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_error = "dtrun: cannot execute '" + o_.path + "': ";

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (o_.tag_output && (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
    DT_THROW(SystemError, "dtrun: pipe2 failed: ", std::strerror(errno));
  }
  sigset_t empty;
  sigemptyset(&empty);
  pid_t pid = ::fork();
  if (pid < 0) DT_THROW(SystemError, "dtrun: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    // Only async-signal-safe calls from here on: the store server's thread exists in the parent.
    ::setpgid(0, 0);
    if (o_.tag_output) {
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
    }
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    ::execve(o_.path.c_str(), argv.data(), envp.data());
    int e = errno;
    ssize_t ignored = ::write(2, exec_error.data(), exec_error.size());
    const char* msg = std::strerror(e);  // glibc: a static table lookup for valid errno values
    ignored = ::write(2, msg, std::strlen(msg));
    ignored = ::write(2, "\n", 1);
    (void)ignored;
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also done by the child; whichever runs first wins the race with kill()
  c.pid = pid;
  c.alive = true;
  if (o_.tag_output) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    c.out.fd = out_pipe[0];
    c.out.out_fd = 1;
    c.err.fd = err_pipe[0];
    c.err.out_fd = 2;
  }
  children_.push_back(std::move(c));
}

void Generation::signal_alive(int sig) {
  for (auto& c : children_) {
    if (!c.alive) continue;
    if (::kill(-c.pid, sig) != 0) ::kill(c.pid, sig);
    // A stopped rank (SIGSTOP, a hung one) gets SIGTERM only once it runs again.
    if (sig == SIGTERM && ::kill(-c.pid, SIGCONT) != 0) ::kill(c.pid, SIGCONT);
  }
}

void Generation::begin_stop(int sig) {
  if (!stopping_) {
    stopping_ = true;
    for (auto& c : children_)
      if (c.alive) stopped_ranks_.push_back(c.rank);
    kill_at_ = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(o_.grace_s * 1e6));
  }
  signal_alive(sig);
}

void Generation::on_signal(int sig) {
  if (sig == SIGCHLD) return reap();
  if (received_signal_ != 0) {
    say("got " + signal_name(sig) + " again; killing the ranks");
    signal_alive(SIGKILL);
    return;
  }
  received_signal_ = sig;
  say("got " + signal_name(sig) + "; forwarding it to the ranks");
  begin_stop(sig);
}

// Note [The first failure]
// Survivors see a dead rank within milliseconds and exit on their errors, and a killed process may take longer to
// be torn down (and reaped) than a survivor takes to exit. So the failures of the first kFailureSettle after one
// are gathered before one is named first: one killed by a signal (the others exited on seeing it die), else the
// first reaped.
void Generation::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    for (size_t i = 0; i < children_.size(); ++i) {
      Child& c = children_[i];
      if (c.pid != pid || !c.alive) continue;
      c.alive = false;
      c.status = status;
      const bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !stopping_ && first_failure_ < 0) {
        failed_.push_back(static_cast<int>(i));
        if (!settle_at_) settle_at_ = Clock::now() + kFailureSettle;
      }
    }
  }
}

void Generation::name_first_failure() {
  settle_at_.reset();
  if (failed_.empty() || stopping_ || first_failure_ >= 0) return;
  int first = failed_.front();
  for (int i : failed_)
    if (WIFSIGNALED(children_[size_t(i)].status) && !WIFSIGNALED(children_[size_t(first)].status)) first = i;
  failed_.clear();
  first_failure_ = first;
  const Child& c = children_[size_t(first)];
  const std::string what =
      "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " + describe_status(c.status);
  if (!any_alive()) {
    say(what);
  } else if (o_.failure_grace_s <= 0) {
    say(what + "; stopping the other ranks");
    begin_stop(SIGTERM);
  } else {
    say(what + "; the other ranks have " + seconds_str(o_.failure_grace_s) + " s to exit before they are stopped");
    stop_at_ = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(o_.failure_grace_s * 1e6));
  }
}

void Generation::emit_lines(Stream& s, int rank, bool flush_all) {
  constexpr size_t kMaxLine = 64 * 1024;  // a longer line is emitted in pieces
  const std::string tag = "[r" + std::to_string(rank) + "] ";
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) {
      if (s.pending.size() - start >= kMaxLine || (flush_all && start < s.pending.size())) {
        write_fd(s.out_fd, tag + s.pending.substr(start) + "\n");
        start = s.pending.size();
      }
      break;
    }
    write_fd(s.out_fd, tag + s.pending.substr(start, nl + 1 - start));
    start = nl + 1;
  }
  s.pending.erase(0, start);
}

void Generation::pump(Stream& s, int rank) {
  char buf[65536];
  ssize_t n = ::read(s.fd, buf, sizeof(buf));
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    emit_lines(s, rank, true);
    ::close(s.fd);
    s.fd = -1;
    return;
  }
  s.pending.append(buf, static_cast<size_t>(n));
  emit_lines(s, rank, false);
}

GenerationEnd Generation::run(int sfd, const std::function<std::string()>& stop_wanted) {
  const int nlocal = static_cast<int>(spec_.slots.size());
  for (int l = 0; l < nlocal; ++l) {
    try {
      spawn(l);
    } catch (const dt::Error& e) {
      say(e.what());
      begin_stop(SIGKILL);
      first_failure_ = -1;
      received_signal_ = 0;
      break;
    }
  }
  const bool spawn_failed = static_cast<int>(children_.size()) < nlocal;
  auto next_resize_check = Clock::now();

  std::optional<Clock::time_point> drain_until;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Child*, Stream*>> owners;
    fds.push_back({sfd, POLLIN, 0});
    owners.push_back({nullptr, nullptr});
    for (auto& c : children_) {
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          owners.push_back({&c, s});
        }
      }
    }
    bool alive = any_alive();
    if (!alive) {
      if (fds.size() == 1) break;
      // Every rank is gone; a grandchild may still hold a pipe open: drain for a short while only.
      if (!drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
      if (Clock::now() >= *drain_until) break;
    }
    const bool watch_resize = stop_wanted && alive && !stopping_ && first_failure_ < 0 && failed_.empty();
    int timeout_ms = -1;
    auto until = !alive       ? drain_until
                 : kill_at_   ? kill_at_
                 : settle_at_ ? settle_at_
                 : stopping_  ? std::nullopt
                              : stop_at_;
    if (watch_resize && (!until || *until > next_resize_check)) until = next_resize_check;
    if (until) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*until - Clock::now()).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      say(std::string("poll failed: ") + std::strerror(errno));
      signal_alive(SIGKILL);
      break;
    }
    if (settle_at_ && Clock::now() >= *settle_at_) name_first_failure();
    if (stop_at_ && !stopping_ && Clock::now() >= *stop_at_ && any_alive()) {
      say("rank(s) " + alive_names() + " still running " + seconds_str(o_.failure_grace_s) + " s after rank " +
          std::to_string(children_[size_t(first_failure_)].rank) + " failed; stopping them");
      for (auto& c : children_) c.hung = c.alive;
      begin_stop(SIGTERM);
    }
    if (kill_at_ && Clock::now() >= *kill_at_ && any_alive()) {
      say("rank(s) " + alive_names() + " still running " + seconds_str(o_.grace_s) +
          " s after SIGTERM; sending SIGKILL");
      signal_alive(SIGKILL);
      kill_at_.reset();
    }
    if (watch_resize && Clock::now() >= next_resize_check) {
      next_resize_check = Clock::now() + std::chrono::milliseconds(100);
      if (const std::string why = stop_wanted(); !why.empty()) {
        say("stopping rank(s) " + alive_names() + ": " + why);
        resizing_ = true;
        begin_stop(SIGTERM);
      }
    }
    if (rc <= 0) continue;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        on_signal(static_cast<int>(info.ssi_signo));
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i].second, owners[i].first->rank);
    }
    reap();  // SIGCHLD coalesces; cheap to check anyway
  }
  name_first_failure();  // every rank ended within the settle time
  // Close any pipe still held open by a grandchild.
  for (auto& c : children_) {
    for (Stream* s : {&c.out, &c.err}) {
      if (s->fd >= 0) {
        emit_lines(*s, c.rank, true);
        ::close(s->fd);
        s->fd = -1;
      }
    }
  }

  const std::string stopped = stopped_ranks_.empty() ? std::string("none") : join_ints(stopped_ranks_);
  GenerationEnd end;
  if (first_failure_ >= 0) {
    const Child& c = children_[size_t(first_failure_)];
    end.kind = GenerationEnd::Kind::kFailed;
    end.exit_code = exit_code_of(c.status);
    end.failed_slot = spec_.slots[size_t(c.local_rank)];
    for (const Child& h : children_)
      if (h.hung) end.hung_slots.push_back(spec_.slots[size_t(h.local_rank)]);
    end.error = read_error_file(error_file(c.local_rank)).value_or("");
    say("rank " + std::to_string(c.rank) + " failed first: " + describe_status(c.status) +
        "; stopped rank(s): " + stopped);
    if (!end.error.empty()) say("rank " + std::to_string(c.rank) + "'s error file: " + end.error);
  } else if (received_signal_ != 0) {
    say("interrupted by " + signal_name(received_signal_) + "; stopped rank(s): " + stopped);
    end.kind = GenerationEnd::Kind::kInterrupted;
    end.exit_code = 128 + received_signal_;
  } else if (spawn_failed) {
    end.kind = GenerationEnd::Kind::kSpawnFailed;
    end.exit_code = 1;
  } else if (resizing_) {
    end.kind = GenerationEnd::Kind::kResized;
  }
  return end;
}

}  // namespace

GenerationEnd run_generation(const LaunchOptions& options, const GenerationSpec& spec, int signal_fd,
                             const std::function<std::string()>& stop_wanted) {
  return Generation(options, spec).run(signal_fd, stop_wanted);
}

void say(const std::string& msg) { write_fd(2, "dtrun: " + msg + "\n"); }

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out;
}

}  // namespace dt::dtrun
