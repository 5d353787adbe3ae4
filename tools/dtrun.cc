// dtrun: starts the ranks of a job on this node, hosts the job's store (node rank 0), optionally tags output lines
// with the rank, forwards SIGINT/SIGTERM/SIGHUP/SIGQUIT, and when a rank fails stops the others; with
// --max-restarts N it then starts the job again, as a new generation, up to N times, on the slots that are left
// when --nproc-per-node is a range MIN:MAX (Note [Elastic generations]).
//
// Each rank gets DT_RANK, DT_WORLD_SIZE, DT_LOCAL_RANK, DT_LOCAL_WORLD_SIZE, DT_NODE_RANK, DT_SLOT, DT_MASTER_ADDR,
// DT_MASTER_PORT, DT_STORE_SECRET, DT_STORE_HOSTED=1, DT_RESTART_COUNT, DT_MAX_RESTARTS (and DT_TIMEOUT_S with
// --timeout), and torchrun's environment with the same values: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR, MASTER_PORT (a port of its own,
// for torch.distributed's store), TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID and
// TORCHELASTIC_ERROR_FILE (Note [Error files] in core/error_file.h: dtrun names the message of the rank that failed
// first). Ranks run in their own process groups (a signal reaches a rank's whole process tree) with stdin from
// /dev/null.
//
// Exit code: 0 when every rank of a generation exits 0; else the exit code of the rank that failed first in the last
// generation (128 + signal number when a signal killed it); 128 + signal when dtrun itself was interrupted; 2 for
// usage errors; 127 when the program cannot be found; 1 when too few slots are left for another generation.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/bootstrap.h"
#include "collectives/store/store_protocol.h"
#include "collectives/store/tcp_store.h"
#include "core/config.h"
#include "core/error.h"
#include "tools/args.h"
#include "tools/dtrun_generation.h"
#include "tools/dtrun_rendezvous.h"

extern char** environ;

namespace {

using dt::dtrun::say;
using dt::dtrun::seconds_str;
using dt::dtrun::signal_name;
using Clock = std::chrono::steady_clock;

const char* kUsage =
    "usage: dtrun --nproc-per-node N|MIN:MAX [--nnodes M|MIN:MAX --node-rank I --master-addr A --master-port P]\n"
    "             [--max-restarts R] [--world-multiple K] [--slot-file F] [--settle S] [--log-dir D]\n"
    "             [--tag-output] [--timeout S] [--grace-period S] [--failure-grace S] [--] program [args...]\n"
    "\n"
    "  --nproc-per-node N  ranks to start on this node (required); MIN:MAX: an elastic job on MAX slots, which goes\n"
    "                      on with fewer (at least MIN) when a slot is lost\n"
    "  --nnodes M          nodes in the job (default 1); run one dtrun per node; MIN:MAX: an elastic job whose\n"
    "                      generations take the node agents that come (at least MIN; with --max-restarts)\n"
    "  --node-rank I       this node's index, 0..M-1 (default 0); node 0 hosts the store; in an elastic or\n"
    "                      restarting job on several nodes, the agent's id (node 0's must be 0; a generation's node\n"
    "                      ranks are the places of the agents that joined it)\n"
    "  --rdzv-timeout S    several nodes with restarts: how long an agent waits for a generation to form (default "
    "120)\n"
    "  --master-addr A     address of node 0, where the store listens (default 127.0.0.1; required when M > 1)\n"
    "  --master-port P     store port (default: a free port when M == 1, else 29500); MASTER_PORT, for PyTorch's\n"
    "                      own store, is P + 1 (a free port when M == 1)\n"
    "  --max-restarts R    when a rank fails, stop the others and start the job again, up to R times (default 0);\n"
    "                      each start is a generation with DT_RESTART_COUNT (TORCHELASTIC_RESTART_COUNT) = 0, 1, ..\n"
    "  --world-multiple K  an elastic generation runs a multiple of K ranks (the job's tp x pp; default 1)\n"
    "  --slot-file F       elastic: dtrun writes the lost slots there, one per line, and watches the file: delete a\n"
    "                      line to return a slot (the job restarts on more ranks at once)\n"
    "  --settle S          seconds between a generation's end and the next one's start (default 1)\n"
    "  --log-dir D         where the ranks' error files go (D/attempt_<g>/<local rank>/error.json; default: a\n"
    "                      temporary folder removed at the end)\n"
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
  int nproc_min = -1, nproc_max = -1;  // --nproc-per-node N is N:N
  int nnodes = 1, nnodes_min = 1;      // --nnodes N is N:N
  int node_rank = 0;
  double rdzv_timeout_s = 120;
  std::string master_addr;
  int master_port = -1;
  int max_restarts = 0;
  int world_multiple = 1;
  std::string slot_file;
  double settle_s = 1.0;
  std::string log_dir;
  bool tag_output = false;
  std::string timeout;  // as given, validated
  double grace_s = 5.0;
  double failure_grace_s = 5.0;
  std::vector<std::string> program;
  bool elastic() const { return nproc_min < nproc_max; }
  // Node agents meet at every generation (Note [Agent rendezvous]).
  bool rendezvous() const { return nnodes > 1 && (max_restarts > 0 || nnodes_min < nnodes); }
};

using dt::tools::UsageError;

// The option's value as an integer in [lo, hi].
int int_value(const std::string& name, const std::string& v, int lo, int hi) {
  long long n = 0;
  if (!dt::tools::parse_number(v, n) || n < lo || n > hi)
    throw UsageError{name + " expects an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + v +
                     "'"};
  return static_cast<int>(n);
}
int int_arg(dt::tools::ArgReader& args, int lo, int hi) { return int_value(args.name(), args.value(), lo, hi); }

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
      const std::string v = args.value();
      const size_t colon = v.find(':');
      o.nproc_min = int_value("--nproc-per-node", v.substr(0, colon), 1, 65536);
      o.nproc_max =
          colon == std::string::npos ? o.nproc_min : int_value("--nproc-per-node", v.substr(colon + 1), 1, 65536);
      if (o.nproc_min > o.nproc_max) throw UsageError{"--nproc-per-node MIN:MAX needs MIN <= MAX, got '" + v + "'"};
    } else if (args.is("--nnodes")) {
      const std::string v = args.value();
      const size_t colon = v.find(':');
      o.nnodes_min = int_value("--nnodes", v.substr(0, colon), 1, 65536);
      o.nnodes = colon == std::string::npos ? o.nnodes_min : int_value("--nnodes", v.substr(colon + 1), 1, 65536);
      if (o.nnodes_min > o.nnodes) throw UsageError{"--nnodes MIN:MAX needs MIN <= MAX, got '" + v + "'"};
    } else if (args.is("--rdzv-timeout")) {
      o.rdzv_timeout_s = seconds_arg(args, false);
    } else if (args.is("--node-rank")) {
      o.node_rank = int_arg(args, 0, 65535);
    } else if (args.is("--master-addr")) {
      o.master_addr = args.value();
      if (o.master_addr.empty()) throw UsageError{"--master-addr needs a non-empty address"};
    } else if (args.is("--master-port")) {
      o.master_port = int_arg(args, 0, 65534);
    } else if (args.is("--max-restarts")) {
      o.max_restarts = int_arg(args, 0, 1 << 20);
    } else if (args.is("--world-multiple")) {
      o.world_multiple = int_arg(args, 1, 65536);
    } else if (args.is("--slot-file")) {
      o.slot_file = args.value();
    } else if (args.is("--settle")) {
      o.settle_s = seconds_arg(args, true);
    } else if (args.is("--log-dir")) {
      o.log_dir = args.value();
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
  if (o.nproc_min < 0) throw UsageError{"--nproc-per-node is required"};
  if (o.program.empty()) throw UsageError{"no program given"};
  if (o.node_rank >= o.nnodes && !o.rendezvous())
    throw UsageError{"--node-rank " + std::to_string(o.node_rank) + " must be < --nnodes " + std::to_string(o.nnodes)};
  if (static_cast<long>(o.nnodes) * o.nproc_max > 1 << 20) throw UsageError{"too many ranks"};
  if (o.nnodes > 1 && o.elastic())
    throw UsageError{"--nproc-per-node MIN:MAX takes one node: on several nodes the elastic size is --nnodes MIN:MAX"};
  if (o.nnodes_min < o.nnodes && o.max_restarts == 0)
    throw UsageError{"--nnodes MIN:MAX needs --max-restarts R > 0 (the job goes on after a node is lost)"};
  if (o.elastic() && o.max_restarts == 0)
    throw UsageError{"--nproc-per-node MIN:MAX needs --max-restarts R > 0 (the job goes on after a slot is lost)"};
  if (o.world_multiple > 1 && o.nproc_min % o.world_multiple != 0)
    throw UsageError{"--world-multiple " + std::to_string(o.world_multiple) + " must divide the smallest size " +
                     std::to_string(o.nproc_min)};
  if (!o.slot_file.empty() && !o.elastic())
    throw UsageError{"--slot-file is for an elastic size: --nproc-per-node MIN:MAX"};
  if (o.nnodes > 1) {
    if (o.master_addr.empty()) throw UsageError{"--master-addr is required with --nnodes > 1 (the address of node 0)"};
    if (o.master_port <= 0) o.master_port = dt::kDefaultMasterPort;
  } else {
    if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
    if (o.master_port < 0) o.master_port = 0;
  }
  return o;
}

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

// A TCP port nobody listens on now (the kernel's pick), for PyTorch's store: MASTER_PORT.
int free_tcp_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Note [Elastic generations]
// A job under --max-restarts runs as generations: when a rank fails, the others are stopped (as without restarts)
// and, while restarts are left, the job starts again after --settle seconds with DT_RESTART_COUNT one higher, a
// fresh key space in the store (Note [Generations] in collectives/bootstrap.h) and fresh error files. The store
// (hosted here) lives on across generations.
//
// Note [Lost slots]
// With --nproc-per-node MIN:MAX the node has MAX slots (the processes, and the devices they bind by DT_SLOT). A
// failure loses slots: those whose ranks were still running when the failure grace ran out (a hung rank: stopped,
// or stuck, not dead; the others ended on the collective timeout), else the slot of the rank that failed first. The
// next generation runs on the slots left, as many as the largest multiple of --world-multiple (the job's tp x pp:
// the library's resize policy keeps them and changes dp), and none when that is below MIN: then dtrun stops with the
// last failure's exit code. A lost slot returns when its line is deleted from --slot-file: when that allows a larger
// generation, the running one is stopped (SIGTERM: a trainer saves and exits) and the job starts again on more
// ranks; that restart is not a failure and does not count against --max-restarts.
class Agent {
 public:
  explicit Agent(Options o) : o_(std::move(o)) {}
  int run();

 private:
  int usable(size_t slots_left) const {
    const int n = std::min<int>(o_.nproc_max, int(slots_left));
    return n - n % o_.world_multiple;
  }
  std::vector<int> slots_left() const {
    std::vector<int> out;
    for (int s = 0; s < o_.nproc_max; ++s)
      if (!lost_.count(s)) out.push_back(s);
    return out;
  }
  void write_slot_file() const;
  void read_slot_file();
  bool wait_settle(int sfd, int* signal);
  int run_nodes(const dt::dtrun::LaunchOptions& lo, int sfd, const std::string& secret, int port,
                const std::string& log_dir);

  Options o_;
  std::set<int> lost_;
  std::string slot_file_version_;  // the file's mtime, size and inode when last read
};

void Agent::write_slot_file() const {
  if (o_.slot_file.empty()) return;
  const std::string tmp = o_.slot_file + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    for (int s : lost_) f << s << "\n";
    if (!f) {
      say("cannot write the slot file " + o_.slot_file);
      return;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, o_.slot_file, ec);
  if (ec) say("cannot write the slot file " + o_.slot_file + ": " + ec.message());
}

void Agent::read_slot_file() {
  if (o_.slot_file.empty()) return;
  struct stat st {};
  const bool exists = ::stat(o_.slot_file.c_str(), &st) == 0;
  const std::string version = exists ? std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
                                           "/" + std::to_string(st.st_size) + "/" + std::to_string(st.st_ino)
                                     : std::string("none");
  if (version == slot_file_version_) return;
  slot_file_version_ = version;
  std::ifstream f(o_.slot_file);
  std::set<int> lost;
  std::string word;
  while (f >> word) {
    long long s = -1;
    if (dt::tools::parse_number(word, s) && s >= 0 && s < o_.nproc_max) lost.insert(int(s));
  }
  for (int s : lost_)
    if (!lost.count(s)) say("slot " + std::to_string(s) + " is back (not in " + o_.slot_file + ")");
  lost_ = std::move(lost);
}

// Waits --settle seconds; false (and *signal) when dtrun gets a signal meanwhile.
bool Agent::wait_settle(int sfd, int* signal) {
  const auto until = Clock::now() + std::chrono::microseconds(int64_t(o_.settle_s * 1e6));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return true;
    pollfd p{sfd, POLLIN, 0};
    if (::poll(&p, 1, int(left) + 1) > 0) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        if (info.ssi_signo != SIGCHLD) {
          *signal = int(info.ssi_signo);
          return false;
        }
      }
    }
  }
}

// Generations on several nodes (Note [Agent rendezvous]): this agent's ranks are node rank m.node_index of the
// generation's nodes; a failure anywhere stops every node's ranks, and node 0 counts the restarts.
int Agent::run_nodes(const dt::dtrun::LaunchOptions& lo, int sfd, const std::string& secret, int port,
                     const std::string& log_dir) {
  dt::TcpStoreOptions so;
  so.host = o_.master_addr == "0.0.0.0" ? "127.0.0.1" : o_.master_addr;
  so.port = port;
  so.secret = secret;
  so.timeout = std::chrono::duration_cast<dt::StoreDuration>(std::chrono::duration<double>(o_.rdzv_timeout_s));
  auto store = std::make_shared<dt::TcpStore>(so);
  dt::dtrun::Rendezvous rdzv(store, o_.node_rank, o_.node_rank == 0, o_.nnodes_min, o_.nnodes, o_.settle_s,
                             o_.rdzv_timeout_s);
  int failures = 0, last_code = 0, last_nodes = 0;
  for (int g = rdzv.first_round();; ++g) {
    const dt::dtrun::Membership m = rdzv.join(g);
    g = m.generation;
    if (m.job_over) {
      say("node 0 ended the job");
      return last_code != 0 ? last_code : 1;
    }
    const int nodes = int(m.members.size());
    dt::dtrun::GenerationSpec spec;
    spec.restart_count = g;
    spec.max_restarts = o_.max_restarts;
    spec.node_rank = m.node_index;
    spec.nnodes = nodes;
    spec.first_rank = m.node_index * o_.nproc_max;
    spec.world_size = nodes * o_.nproc_max;
    for (int s = 0; s < o_.nproc_max; ++s) spec.slots.push_back(s);
    spec.master_addr = o_.master_addr;
    spec.store_port = port;
    spec.torch_master_port = o_.master_port + 1;
    spec.secret = secret;
    spec.run_id = secret.substr(0, 12);
    spec.error_dir = log_dir + "/attempt_" + std::to_string(g);
    std::error_code ec;
    std::filesystem::create_directories(spec.error_dir, ec);
    if (g > 0 || nodes != o_.nnodes)
      say("generation " + std::to_string(g) + ": " + std::to_string(nodes) + " node(s) (" +
          std::to_string(spec.world_size) + " ranks), this one node rank " + std::to_string(m.node_index) +
          (last_nodes != 0 && nodes != last_nodes ? " (was " + std::to_string(last_nodes) + " nodes)" : ""));
    last_nodes = nodes;
    const std::function<std::string()> stop_wanted = [&, g]() -> std::string {
      if (rdzv.failed(g)) return "another node's ranks failed";
      if (rdzv.someone_waiting(g)) return "a node agent waits to join: the job starts again on more nodes";
      return "";
    };
    const dt::dtrun::GenerationEnd end = dt::dtrun::run_generation(lo, spec, sfd, stop_wanted);
    using Kind = dt::dtrun::GenerationEnd::Kind;
    if (end.kind == Kind::kSucceeded) {
      rdzv.announce_success(g, nodes);
      return 0;
    }
    if (end.kind == Kind::kFailed) {
      rdzv.announce_failure(g);
      last_code = end.exit_code;
    }
    if (end.kind == Kind::kInterrupted || end.kind == Kind::kSpawnFailed) {
      rdzv.announce_failure(g);
      return end.exit_code;
    }
    const bool failed = end.kind == Kind::kFailed || rdzv.failed(g);
    if (o_.node_rank == 0 && failed && ++failures > o_.max_restarts) {
      say("no restarts left (--max-restarts " + std::to_string(o_.max_restarts) + ")");
      rdzv.end_job(g + 1);
      return last_code != 0 ? last_code : 1;
    }
    if (o_.node_rank == 0)
      say(failed ? "restarting the job (restart " + std::to_string(failures) + " of " +
                       std::to_string(o_.max_restarts) + ")"
                 : std::string("a node agent is waiting: restarting the job on more nodes"));
    int sig = 0;
    if (!wait_settle(sfd, &sig)) {
      say("interrupted by " + signal_name(sig) + " between generations");
      return 128 + sig;
    }
  }
}

int Agent::run() {
  dt::dtrun::LaunchOptions lo;
  const auto path = find_program(o_.program[0]);
  if (!path) {
    say("cannot find the program '" + o_.program[0] + "' (not an executable file, nor on PATH)");
    return 127;
  }
  lo.path = *path;
  lo.program = o_.program;
  lo.tag_output = o_.tag_output;
  lo.timeout = o_.timeout;
  lo.grace_s = o_.grace_s;
  lo.failure_grace_s = o_.failure_grace_s;

  // Signals arrive on a signalfd; block them before any thread (the store server's) exists so that all inherit it.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&handled, s);
  ::sigprocmask(SIG_BLOCK, &handled, &original);
  int sfd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) DT_THROW(SystemError, "dtrun: signalfd failed: ", std::strerror(errno));
  ::signal(SIGPIPE, SIG_IGN);

  std::string secret;
  if (dt::config::is_set(dt::config::Var::kStoreSecret)) {
    secret = dt::config::get_string(dt::config::Var::kStoreSecret);
  } else if (o_.nnodes > 1) {
    say("--nnodes > 1 needs the same DT_STORE_SECRET in every node's environment, e.g. "
        "DT_STORE_SECRET=$(openssl rand -hex 32) on all nodes");
    return 2;
  } else {
    secret = dt::store_protocol::random_hex(32);
  }

  std::unique_ptr<dt::TcpStoreServer> server;
  int port = o_.master_port;
  if (o_.node_rank == 0) {
    dt::TcpStoreServerOptions so;
    so.host = o_.master_addr;
    so.port = o_.master_port;
    so.secret = secret;
    try {
      server = std::make_unique<dt::TcpStoreServer>(so);
    } catch (const dt::Error& e) {
      say(std::string("cannot host the store: ") + e.what());
      return 1;
    }
    port = server->port();
  }

  static const char* kRemoved[] = {"DT_RANK",
                                   "DT_WORLD_SIZE",
                                   "DT_LOCAL_RANK",
                                   "DT_LOCAL_WORLD_SIZE",
                                   "DT_NODE_RANK",
                                   "DT_SLOT",
                                   "DT_MASTER_ADDR",
                                   "DT_MASTER_PORT",
                                   "DT_STORE_SECRET",
                                   "DT_STORE_HOSTED",
                                   "DT_TIMEOUT_S",
                                   "DT_RESTART_COUNT",
                                   "DT_MAX_RESTARTS",
                                   "RANK",
                                   "WORLD_SIZE",
                                   "LOCAL_RANK",
                                   "LOCAL_WORLD_SIZE",
                                   "GROUP_RANK",
                                   "GROUP_WORLD_SIZE",
                                   "ROLE_RANK",
                                   "ROLE_WORLD_SIZE",
                                   "ROLE_NAME",
                                   "MASTER_ADDR",
                                   "MASTER_PORT",
                                   "TORCHELASTIC_RUN_ID",
                                   "TORCHELASTIC_RESTART_COUNT",
                                   "TORCHELASTIC_MAX_RESTARTS",
                                   "TORCHELASTIC_ERROR_FILE",
                                   "TORCHELASTIC_USE_AGENT_STORE"};
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool removed = std::any_of(std::begin(kRemoved), std::end(kRemoved), [&](const char* k) { return key == k; });
    if (key == "DT_TIMEOUT_S" && o_.timeout.empty()) removed = false;  // passed through unless --timeout replaces it
    if (!removed) lo.base_env.push_back(std::move(kv));
  }

  // The error files' folder: --log-dir, else a temporary one removed at the end.
  std::string log_dir = o_.log_dir;
  bool remove_log_dir = false;
  if (log_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dtrun-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      say(std::string("cannot make a folder for the error files: ") + std::strerror(errno));
      return 1;
    }
    log_dir = tmpl;
    remove_log_dir = true;
  }
  struct RemoveDir {
    std::string dir;
    ~RemoveDir() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{remove_log_dir ? log_dir : std::string()};

  if (o_.rendezvous()) {
    const int code = run_nodes(lo, sfd, secret, port, log_dir);
    if (server) server->stop();
    return code;
  }
  read_slot_file();
  int restarts_left = o_.max_restarts;
  int last_size = 0;
  for (int g = 0;; ++g) {
    const std::vector<int> left = slots_left();
    const int n = o_.elastic() ? usable(left.size()) : o_.nproc_max;
    if (n < o_.nproc_min) {
      say(std::to_string(left.size()) + " slot(s) left, " + std::to_string(n) + " usable in multiples of " +
          std::to_string(o_.world_multiple) + ": fewer than the minimum " + std::to_string(o_.nproc_min) +
          "; giving up");
      return 1;
    }
    dt::dtrun::GenerationSpec spec;
    spec.restart_count = g;
    spec.max_restarts = o_.max_restarts;
    spec.node_rank = o_.node_rank;
    spec.nnodes = o_.nnodes;
    spec.first_rank = o_.node_rank * n;
    spec.world_size = o_.nnodes * n;
    spec.slots.assign(left.begin(), left.begin() + n);
    spec.master_addr = o_.master_addr;
    spec.store_port = port;
    spec.torch_master_port = o_.nnodes > 1 ? o_.master_port + 1 : free_tcp_port();
    spec.secret = secret;
    spec.run_id = secret.substr(0, 12);
    spec.error_dir = log_dir + "/attempt_" + std::to_string(g);
    std::error_code ec;
    std::filesystem::create_directories(spec.error_dir, ec);
    if (g > 0)
      say("generation " + std::to_string(g) + ": " + std::to_string(n) + " rank(s) on slot(s) " +
          dt::dtrun::join_ints(spec.slots) +
          (n != last_size ? " (was " + std::to_string(last_size) + ")" : std::string()));
    last_size = n;

    std::function<std::string()> stop_wanted;
    if (!o_.slot_file.empty() && n < o_.nproc_max) {
      stop_wanted = [&, n] {
        read_slot_file();
        return usable(slots_left().size()) > n ? "a slot came back: the job starts again on more ranks" : "";
      };
    }
    const dt::dtrun::GenerationEnd end = dt::dtrun::run_generation(lo, spec, sfd, stop_wanted);
    using Kind = dt::dtrun::GenerationEnd::Kind;
    if (end.kind == Kind::kSucceeded || end.kind == Kind::kInterrupted || end.kind == Kind::kSpawnFailed) {
      if (server) server->stop();
      return end.exit_code;
    }
    if (end.kind == Kind::kFailed) {
      if (restarts_left == 0) {
        if (o_.max_restarts > 0) say("no restarts left (--max-restarts " + std::to_string(o_.max_restarts) + ")");
        if (server) server->stop();
        return end.exit_code;
      }
      --restarts_left;
      if (o_.elastic()) {
        const std::vector<int> lost = !end.hung_slots.empty() ? end.hung_slots : std::vector<int>{end.failed_slot};
        for (int s : lost) lost_.insert(s);
        say("slot(s) " + dt::dtrun::join_ints(lost) + " lost" +
            (!end.hung_slots.empty() ? " (their ranks hung)" : " (its rank failed first)"));
        write_slot_file();
      }
      say("restarting the job (restart " + std::to_string(o_.max_restarts - restarts_left) + " of " +
          std::to_string(o_.max_restarts) + ") in " + seconds_str(o_.settle_s) + " s");
    } else {
      say("slot(s) returned: restarting the job on more ranks in " + seconds_str(o_.settle_s) + " s");
    }
    int sig = 0;
    if (!wait_settle(sfd, &sig)) {
      say("interrupted by " + signal_name(sig) + " between generations");
      if (server) server->stop();
      return 128 + sig;
    }
    read_slot_file();
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o = dt::tools::parse_or_exit("dtrun", [&] { return parse_args(argc, argv); });
  try {
    return Agent(std::move(o)).run();
  } catch (const std::exception& e) {
    say(e.what());
    return 1;
  }
}
