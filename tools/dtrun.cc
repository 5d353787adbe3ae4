// dtrun: starts the ranks of a job on this node, hosts the job's store (node rank 0), optionally tags output lines
// with the rank, forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT, and when a rank fails stops the others.
//
// Each rank gets DT_RANK, DT_WORLD_SIZE, DT_LOCAL_RANK, DT_LOCAL_WORLD_SIZE, DT_NODE_RANK, DT_MASTER_ADDR,
// DT_MASTER_PORT, DT_STORE_SECRET, DT_STORE_HOSTED=1 (and DT_TIMEOUT_S with --timeout); torchrun's RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT are removed so that they cannot disagree. Ranks run in
// their own process groups (a signal reaches a rank's whole process tree) with stdin from /dev/null.
//
// Exit code: 0 when every rank exits 0; else the exit code of the rank that failed first (128 + signal number when a
// signal killed it); 128 + signal when dtrun itself was interrupted; 2 for usage errors; 127 when the program cannot
// be found.
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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/bootstrap.h"
#include "collectives/store/store_protocol.h"
#include "collectives/store/tcp_store.h"
#include "core/config.h"
#include "core/error.h"
#include "tools/args.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

const char* kUsage =
    "usage: dtrun --nproc-per-node N [--nnodes M --node-rank I --master-addr A --master-port P]\n"
    "             [--tag-output] [--timeout S] [--grace-period S]\n"
    "             [--failure-grace S] [--] program [args...]\n"
    "\n"
    "  --nproc-per-node N  ranks to start on this node (required)\n"
    "  --nnodes M          nodes in the job (default 1); run one dtrun per node\n"
    "  --node-rank I       this node's index, 0..M-1 (default 0); node 0 hosts the store\n"
    "  --master-addr A     address of node 0, where the store listens (default 127.0.0.1; required when M > 1)\n"
    "  --master-port P     store port (default: a free port when M == 1, else 29500)\n"
    "  --tag-output        prefix every output line with the rank: [r3] ...\n"
    "  --timeout S         deadline in seconds of every blocking call in the ranks (sets DT_TIMEOUT_S)\n"
    "  --grace-period S    seconds between SIGTERM and SIGKILL when stopping ranks (default 5)\n"
    "  --failure-grace S   after a rank fails, seconds the others have to exit on their own, each reporting the\n"
    "                      error it saw, before they are stopped (default 5; 0: stop them at once)\n"
    "  --help-env          list the environment variables dtensor reads, with their defaults\n"
    "\n"
    "With M > 1 every node's dtrun needs the same DT_STORE_SECRET in its environment; with M == 1 dtrun generates a\n"
    "secret unless DT_STORE_SECRET is set.\n";

struct Options {
  int nproc_per_node = -1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = -1;
  bool tag_output = false;
  std::string timeout;  // as given, validated
  double grace_s = 5.0;
  double failure_grace_s = 5.0;
  std::vector<std::string> program;
};

using dt::tools::UsageError;

// The option's value as an integer in [lo, hi].
int int_arg(dt::tools::ArgReader& args, int lo, int hi) {
  const std::string v = args.value();
  long long n = 0;
  if (!dt::tools::parse_number(v, n) || n < lo || n > hi)
    throw UsageError{args.name() + " expects an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                     ", got '" + v + "'"};
  return static_cast<int>(n);
}

// The option's value as a number of seconds (> 0, or >= 0 with allow_zero); `text` gets it as given.
double seconds_arg(dt::tools::ArgReader& args, bool allow_zero, std::string* text = nullptr) {
  const std::string v = args.value();
  double s = 0;
  const bool ok = dt::tools::parse_number(v, s) && std::isfinite(s) && (allow_zero ? s >= 0 : s > 0) && s < 1e9;
  if (!ok)
    throw UsageError{args.name() + " expects " +
                     (allow_zero ? "a number of seconds >= 0" : "a positive number of seconds") + ", got '" + v + "'"};
  if (text) *text = v;
  return s;
}

// dtrun's options, up to the program (the first operand, or what follows "--"); the program and its arguments are
// passed on untouched.
Options parse_args(int argc, char** argv) {
  Options o;
  dt::tools::ArgReader args(argc, argv, kUsage);
  while (args.next()) {
    if (!args.is_option()) {
      o.program = args.rest();  // the program and its own arguments, untouched
    } else if (args.is("--help-env")) {
      args.no_value();
      std::fputs(dt::config::help_text().c_str(), stdout);
      std::exit(0);
    } else if (args.is("--nproc-per-node")) {
      o.nproc_per_node = int_arg(args, 1, 65536);
    } else if (args.is("--nnodes")) {
      o.nnodes = int_arg(args, 1, 65536);
    } else if (args.is("--node-rank")) {
      o.node_rank = int_arg(args, 0, 65535);
    } else if (args.is("--master-addr")) {
      o.master_addr = args.value();
      if (o.master_addr.empty()) throw UsageError{"--master-addr needs a non-empty address"};
    } else if (args.is("--master-port")) {
      o.master_port = int_arg(args, 0, 65535);
    } else if (args.is("--timeout")) {
      seconds_arg(args, false, &o.timeout);
    } else if (args.is("--grace-period")) {
      o.grace_s = seconds_arg(args, true);
    } else if (args.is("--failure-grace")) {
      o.failure_grace_s = seconds_arg(args, true);
    } else if (!args.take("--tag-output", o.tag_output)) {
      throw args.unexpected();
    }
  }
  if (o.nproc_per_node < 0) throw UsageError{"--nproc-per-node is required"};
  if (o.program.empty()) throw UsageError{"no program given"};
  if (o.node_rank >= o.nnodes)
    throw UsageError{"--node-rank " + std::to_string(o.node_rank) + " must be < --nnodes " + std::to_string(o.nnodes)};
  if (static_cast<long>(o.nnodes) * o.nproc_per_node > 1 << 20) throw UsageError{"too many ranks"};
  if (o.nnodes > 1) {
    if (o.master_addr.empty()) throw UsageError{"--master-addr is required with --nnodes > 1 (the address of node 0)"};
    if (o.master_port <= 0) o.master_port = dt::kDefaultMasterPort;
  } else {
    if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
    if (o.master_port < 0) o.master_port = 0;
  }
  return o;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
}

std::string seconds_str(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

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

void say(const std::string& msg) { write_fd(2, "dtrun: " + msg + "\n"); }

std::optional<std::string> find_program(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return executable(name) ? std::optional<std::string>(name) : std::nullopt;
  const std::string dirs = dt::config::lookup("PATH").value_or("/usr/local/bin:/usr/bin:/bin");
  size_t start = 0;
  for (;;) {
    size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (executable(cand)) return cand;
    if (end == std::string::npos) return std::nullopt;
    start = end + 1;
  }
}

struct Stream {
  int fd = -1;
  int out_fd = 1;  // where its lines go
  std::string pending;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool alive = false;
  int status = 0;
  Stream out, err;
};

class Launcher {
 public:
  explicit Launcher(Options o) : o_(std::move(o)) {}
  int run();

 private:
  void spawn(int local_rank, const std::string& path, const std::vector<std::string>& base_env);
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

  Options o_;
  std::string secret_;
  int port_ = 0;
  std::vector<Child> children_;
  bool stopping_ = false;
  std::optional<Clock::time_point> kill_at_;
  std::optional<Clock::time_point> settle_at_;  // Note [The first failure]
  std::vector<int> failed_;                     // failures reaped before settle_at_ (indices into children_)
  std::optional<Clock::time_point> stop_at_;    // a rank failed: the others are stopped then unless gone by then
  int received_signal_ = 0;
  int first_failure_ = -1;  // index into children_ of the first rank that failed on its own
  std::vector<int> stopped_ranks_;
};

void Launcher::spawn(int local_rank, const std::string& path, const std::vector<std::string>& base_env) {
  Child c;
  c.rank = o_.node_rank * o_.nproc_per_node + local_rank;
  std::vector<std::string> env = base_env;
  auto add = [&](const char* k, const std::string& v) { env.push_back(std::string(k) + "=" + v); };
  add("DT_RANK", std::to_string(c.rank));
  add("DT_WORLD_SIZE", std::to_string(o_.nnodes * o_.nproc_per_node));
  add("DT_LOCAL_RANK", std::to_string(local_rank));
  add("DT_LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node));
  add("DT_NODE_RANK", std::to_string(o_.node_rank));
  add("DT_MASTER_ADDR", o_.master_addr);
  add("DT_MASTER_PORT", std::to_string(port_));
  add("DT_STORE_SECRET", secret_);
  add("DT_STORE_HOSTED", "1");
  if (!o_.timeout.empty()) add("DT_TIMEOUT_S", o_.timeout);
  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (auto& a : o_.program) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string exec_error = "dtrun: cannot execute '" + path + "': ";

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
    ::execve(path.c_str(), argv.data(), envp.data());
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

void Launcher::signal_alive(int sig) {
  for (auto& c : children_) {
    if (c.alive && ::kill(-c.pid, sig) != 0) ::kill(c.pid, sig);
  }
}

void Launcher::begin_stop(int sig) {
  if (!stopping_) {
    stopping_ = true;
    for (auto& c : children_)
      if (c.alive) stopped_ranks_.push_back(c.rank);
    kill_at_ = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(o_.grace_s * 1e6));
  }
  signal_alive(sig);
}

void Launcher::on_signal(int sig) {
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
void Launcher::reap() {
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

void Launcher::name_first_failure() {
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

void Launcher::emit_lines(Stream& s, int rank, bool flush_all) {
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

void Launcher::pump(Stream& s, int rank) {
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

int Launcher::run() {
  auto path = find_program(o_.program[0]);
  if (!path) {
    say("cannot find the program '" + o_.program[0] + "' (not an executable file, nor on PATH)");
    return 127;
  }

  // Signals arrive on a signalfd; block them before any thread (the store server's) exists so that all inherit it.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  int sfd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) DT_THROW(SystemError, "dtrun: signalfd failed: ", std::strerror(errno));
  ::signal(SIGPIPE, SIG_IGN);

  if (dt::config::is_set(dt::config::Var::kStoreSecret)) {
    secret_ = dt::config::get_string(dt::config::Var::kStoreSecret);
  } else if (o_.nnodes > 1) {
    say("--nnodes > 1 needs the same DT_STORE_SECRET in every node's environment, e.g. "
        "DT_STORE_SECRET=$(openssl rand -hex 32) on all nodes");
    return 2;
  } else {
    secret_ = dt::store_protocol::random_hex(32);
  }

  std::unique_ptr<dt::TcpStoreServer> server;
  port_ = o_.master_port;
  if (o_.node_rank == 0) {
    dt::TcpStoreServerOptions so;
    so.host = o_.master_addr;
    so.port = o_.master_port;
    so.secret = secret_;
    try {
      server = std::make_unique<dt::TcpStoreServer>(so);
    } catch (const dt::Error& e) {
      say(std::string("cannot host the store: ") + e.what());
      return 1;
    }
    port_ = server->port();
  }

  std::vector<std::string> base_env;
  static const char* kRemoved[] = {"DT_RANK",          "DT_WORLD_SIZE",  "DT_LOCAL_RANK",  "DT_LOCAL_WORLD_SIZE",
                                   "DT_NODE_RANK",     "DT_MASTER_ADDR", "DT_MASTER_PORT", "DT_STORE_SECRET",
                                   "DT_STORE_HOSTED",  "RANK",           "WORLD_SIZE",     "LOCAL_RANK",
                                   "LOCAL_WORLD_SIZE", "MASTER_ADDR",    "MASTER_PORT",    "DT_TIMEOUT_S"};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool removed = std::any_of(std::begin(kRemoved), std::end(kRemoved), [&](const char* k) { return key == k; });
    if (key == "DT_TIMEOUT_S" && o_.timeout.empty()) removed = false;  // passed through unless --timeout replaces it
    if (!removed) base_env.push_back(std::move(kv));
  }

  for (int l = 0; l < o_.nproc_per_node; ++l) {
    try {
      spawn(l, *path, base_env);
    } catch (const dt::Error& e) {
      say(e.what());
      begin_stop(SIGKILL);
      first_failure_ = -1;
      received_signal_ = 0;
      break;
    }
  }
  const bool spawn_failed = static_cast<int>(children_.size()) < o_.nproc_per_node;

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
    int timeout_ms = -1;
    auto until = !alive       ? drain_until
                 : kill_at_   ? kill_at_
                 : settle_at_ ? settle_at_
                 : stopping_  ? std::nullopt
                              : stop_at_;
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
      begin_stop(SIGTERM);
    }
    if (kill_at_ && Clock::now() >= *kill_at_ && any_alive()) {
      say("rank(s) " + alive_names() + " still running " + seconds_str(o_.grace_s) +
          " s after SIGTERM; sending SIGKILL");
      signal_alive(SIGKILL);
      kill_at_.reset();
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
  if (server) server->stop();

  auto stopped_list = [&] {
    std::string out;
    for (int r : stopped_ranks_) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out.empty() ? std::string("none") : out;
  };
  if (first_failure_ >= 0) {
    const Child& c = children_[first_failure_];
    say("rank " + std::to_string(c.rank) + " failed first: " + describe_status(c.status) +
        "; stopped rank(s): " + stopped_list());
    return exit_code_of(c.status);
  }
  if (received_signal_ != 0) {
    say("interrupted by " + signal_name(received_signal_) + "; stopped rank(s): " + stopped_list());
    return 128 + received_signal_;
  }
  if (spawn_failed) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = dt::tools::parse_or_exit("dtrun", [&] { return parse_args(argc, argv); });
  try {
    return Launcher(std::move(o)).run();
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}
