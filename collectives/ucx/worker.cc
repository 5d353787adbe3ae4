#include "collectives/ucx/worker.h"

#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collectives/ucx/cma_guard.h"
#include "collectives/ucx/tag.h"
#include "collectives/ucx/views.h"
#include "core/config.h"
#include "core/logging.h"

namespace dt::ucx {

std::string error_message(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown error";
  }
}

namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

// /proc/<pid>/stat: state (field 3) and start time (field 22). False when the process does not exist.
bool read_proc_stat(int64_t pid, char* state, uint64_t* start_time) {
  std::string line = read_first_line("/proc/" + std::to_string(pid) + "/stat");
  size_t close = line.rfind(')');
  if (line.empty() || close == std::string::npos) return false;
  std::istringstream is(line.substr(close + 1));
  std::string field;
  std::vector<std::string> f;
  while (is >> field) f.push_back(field);
  if (f.size() < 20) return false;
  *state = f[0].empty() ? '?' : f[0][0];
  *start_time = std::strtoull(f[19].c_str(), nullptr, 10);
  return true;
}

// "" when the process (pid, start time) is alive, else why it is not.
std::string process_dead_reason(int64_t pid, uint64_t start_time) {
  char state = '?';
  uint64_t st = 0;
  if (!read_proc_stat(pid, &state, &st)) return "its process " + std::to_string(pid) + " is gone";
  if (st != start_time) return "its process " + std::to_string(pid) + " is gone (the pid was reused)";
  if (state == 'Z' || state == 'X' || state == 'x')
    return "its process " + std::to_string(pid) + " exited or was killed";
  return "";
}

std::string identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  char state;
  uint64_t start = 0;
  read_proc_stat(getpid(), &state, &start);
  std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  char ns[128] = {0};
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  if (n < 0) n = 0;
  ns[n] = 0;
  std::ostringstream os;
  os << getpid() << ' ' << start << ' ' << (host[0] ? host : "?") << ' ' << (boot.empty() ? "?" : boot) << ' '
     << (ns[0] ? ns : "?");
  return os.str();
}

int online_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN)));
}

void check_ucs(ucs_status_t s, const char* what) {
  if (s != UCS_OK) DT_THROW(SystemError, "UCX: ", what, " failed: ", ucs_status_string(s));
}

// Progress threads of live workers, stopped by an atexit handler before UCX's own library destructors run (a
// communicator leaked until exit must not touch a torn-down UCX).
std::mutex g_live_mu;
std::vector<UcxWorker*>& live_workers() {
  static auto* v = new std::vector<UcxWorker*>();
  return *v;
}

}  // namespace

void stop_all_progress_threads() {
  std::lock_guard<std::mutex> lock(g_live_mu);
  for (UcxWorker* w : live_workers()) w->stop_thread();
}

// ---- construction ----

UcxWorker::UcxWorker(std::shared_ptr<Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

std::shared_ptr<UcxWorker> UcxWorker::create(std::shared_ptr<Store> store, int rank, int size) {
  DT_CHECK_ARG(store != nullptr, "create_ucx_communicator: the store is null");
  DT_CHECK_ARG(size >= 1 && uint32_t(size) <= kMaxGroupSize, "create_ucx_communicator: world size must be in [1, ",
               kMaxGroupSize, "], got ", size);
  DT_CHECK_ARG(rank >= 0 && rank < size, "create_ucx_communicator: rank must be in [0, ", size, "), got ", rank);
  std::shared_ptr<UcxWorker> w(new UcxWorker(std::move(store), rank, size));
  // Every rank creates its workers over this store in the same order, so the k-th creation on each rank pairs up.
  const int64_t generation = w->store_->add("dt_ucx/generation/" + std::to_string(rank), 1);
  w->init(generation);
  return w;
}

void UcxWorker::init(int64_t generation) {
  prefix_ = "dt_ucx/" + std::to_string(generation);
  ucp_config_t* config = nullptr;
  check_ucs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  ucp_params_t params;
  std::memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  // Tag matching plus wakeup (the event descriptor the progress thread sleeps on). No peer error handling: see
  // Note [UCX failure detection].
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = size_t(size_);
  ucs_status_t st = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  check_ucs(st, "ucp_init");

  ucp_worker_params_t wp;
  std::memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // several threads, never at once: mu_ serializes every call
  check_ucs(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
  check_ucs(ucp_worker_get_efd(worker_, &efd_), "ucp_worker_get_efd");

  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  check_ucs(ucp_worker_get_address(worker_, &addr, &addr_len), "ucp_worker_get_address");
  std::string mine = identity() + "\n";
  mine.append(reinterpret_cast<const char*>(addr), addr_len);
  ucp_worker_release_address(worker_, addr);
  store_->set(prefix_ + "/peer/" + std::to_string(rank_), mine);

  const std::string me = identity();
  std::istringstream mis(me);
  std::string my_pid, my_start, my_host, my_boot, my_ns;
  mis >> my_pid >> my_start >> my_host >> my_boot >> my_ns;
  peers_.resize(size_t(size_));
  eps_.assign(size_t(size_), nullptr);
  int local = 0;
  for (int r = 0; r < size_; ++r) {
    std::string v = r == rank_ ? mine : store_->get(prefix_ + "/peer/" + std::to_string(r));
    size_t nl = v.find('\n');
    DT_CHECK_ARG(nl != std::string::npos, "UCX rendezvous: malformed entry of rank ", r, " in the store");
    std::istringstream is(v.substr(0, nl));
    std::string host, boot, ns;
    PeerInfo& p = peers_[size_t(r)];
    is >> p.pid >> p.start_time >> host >> boot >> ns;
    p.host = host;
    p.same_host = host == my_host && boot == my_boot && ns == my_ns;
    if (p.same_host) ++local;
    if (r == rank_) continue;
    if (p.same_host) register_cma_peer(pid_t(p.pid));
    ucp_ep_params_t ep;
    std::memset(&ep, 0, sizeof(ep));
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    std::string remote = v.substr(nl + 1);
    ep.address = reinterpret_cast<const ucp_address_t*>(remote.data());
    check_ucs(ucp_ep_create(worker_, &ep, &eps_[size_t(r)]), "ucp_ep_create");
  }

  // A waiting caller polls the worker (as MPI does: on shared cores a sleeping process loses its turn and comes back
  // milliseconds later) for up to DT_UCX_SPIN_US after the last progress, yielding the core between polls when the
  // ranks on this host outnumber its cores, then sleeps on the event descriptor.
  const int cpus = online_cpus();
  spin_ = std::chrono::microseconds(config::get_int(config::Var::kUcxSpinUs));
  yield_ = local > cpus;
  stall_threshold_ = std::chrono::milliseconds(config::get_int(config::Var::kUcxStallMs));

  abort_recv_ = std::make_unique<AbortRecv>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    poll_abort_locked();
  }

  kick_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (kick_fd_ < 0 || epfd_ < 0) DT_THROW(SystemError, "UCX worker: eventfd/epoll_create1 failed: ", strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = efd_;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, efd_, &ev) != 0)
    DT_THROW(SystemError, "UCX worker: epoll_ctl(worker efd) failed: ", strerror(errno));
  ev.data.fd = kick_fd_;
  if (epoll_ctl(epfd_, EPOLL_CTL_ADD, kick_fd_, &ev) != 0)
    DT_THROW(SystemError, "UCX worker: epoll_ctl(eventfd) failed: ", strerror(errno));

  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    static bool registered = [] {
      std::atexit(stop_all_progress_threads);
      return true;
    }();
    (void)registered;
    live_workers().push_back(this);
  }
  thread_ = std::thread([this] { thread_main(); });
  DT_LOG_INFO("UCX worker up: rank ", rank_, "/", size_, ", ", local, " rank(s) on this host, spin ", spin_.count(), " us");
}

void UcxWorker::stop_thread() {
  stop_.store(true);
  kick();
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
  }
}

UcxWorker::~UcxWorker() {
  {
    std::lock_guard<std::mutex> lock(g_live_mu);
    auto& v = live_workers();
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  stop_thread();
  std::vector<std::shared_ptr<UcxOp>> keep;  // ops stay alive until UCX is gone (callbacks point into them)
  if (worker_ != nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto running = running_;
    // Queued calls too: their communicator state and ops hold each other until the queue is cleared.
    for (auto& wc : comms_)
      if (auto c = wc.lock()) {
        for (auto& op : c->queue)
          if (std::find(running.begin(), running.end(), op) == running.end()) running.push_back(op);
        c->queue.clear();
      }
    for (auto& op : running)
      op->abort(make_error(ErrorCode::kRemoteError,
                           op->description() + ": the communicator was destroyed while this call was in flight"));
    keep = std::move(zombies_);
    for (auto& op : running) keep.push_back(op);
    running_.clear();
    dirty_.clear();
    if (abort_recv_ && abort_recv_->request != nullptr) ucp_request_cancel(worker_, abort_recv_->request);
    for (int i = 0; i < 100 && ucp_worker_progress(worker_); ++i) {
    }
    // Close the endpoints (flushing what is in flight), giving up after a second: a dead peer never answers.
    std::vector<void*> closing;
    for (ucp_ep_h ep : eps_) {
      if (ep == nullptr) continue;
      ucp_request_param_t p;
      std::memset(&p, 0, sizeof(p));
      void* r = ucp_ep_close_nbx(ep, &p);
      if (UCS_PTR_IS_PTR(r)) closing.push_back(r);
    }
    auto deadline = Clock::now() + std::chrono::seconds(1);
    for (void* r : closing) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS && Clock::now() < deadline) ucp_worker_progress(worker_);
      if (ucp_request_check_status(r) != UCS_INPROGRESS) ucp_request_free(r);
    }
    if (abort_recv_ && abort_recv_->request != nullptr) ucp_request_free(abort_recv_->request);
    for (auto& a : abort_sends_)
      if (a->request != nullptr) ucp_request_free(a->request);
    ucp_worker_destroy(worker_);
    worker_ = nullptr;
  }
  if (context_ != nullptr) ucp_cleanup(context_);
  if (epfd_ >= 0) close(epfd_);
  if (kick_fd_ >= 0) close(kick_fd_);
}

// ---- engine ----

void UcxWorker::register_comm(const std::shared_ptr<CommState>& comm) {
  comms_.erase(std::remove_if(comms_.begin(), comms_.end(), [](const auto& w) { return w.expired(); }), comms_.end());
  comms_.push_back(comm);
  comm->one_host = direct_copies_allowed();
  for (int g : comm->members) comm->one_host = comm->one_host && peers_[size_t(g)].same_host;
  auto early = early_aborts_.find(comm->id);
  if (early == early_aborts_.end()) return;
  const auto [from, text] = early->second;
  early_aborts_.erase(early);
  auto it = std::find(comm->members.begin(), comm->members.end(), from);
  if (it != comm->members.end())
    fail_comm_locked(*comm, ErrorCode::kRemoteError,
                     str_cat(peer_name(*comm, int(it - comm->members.begin())), " reported: ", text), false);
}

void UcxWorker::submit_locked(const std::shared_ptr<UcxOp>& op) {
  CommState& c = *op->comm();
  const bool p2p = op->args().kind == CollectiveKind::kSend || op->args().kind == CollectiveKind::kRecv;
  if (p2p) {
    running_.push_back(op);
    op->start();
    return;
  }
  c.queue.push_back(op);
  if (c.queue.size() == 1) {
    running_.push_back(op);
    op->start();
  }
}

void UcxWorker::mark_dirty(UcxOp* op) {
  if (op->dirty) return;
  op->dirty = true;
  dirty_.push_back(op);
}

void UcxWorker::op_done_locked(UcxOp* op) {
  if (op->dirty) {  // it leaves running_ and may be destroyed: no list may point at it (see dirty_ in worker.h)
    op->dirty = false;
    std::replace(dirty_.begin(), dirty_.end(), op, static_cast<UcxOp*>(nullptr));
    for (auto* batch : active_batches_) std::replace(batch->begin(), batch->end(), op, static_cast<UcxOp*>(nullptr));
  }
  auto it = std::find_if(running_.begin(), running_.end(), [op](const auto& p) { return p.get() == op; });
  std::shared_ptr<UcxOp> self;
  if (it != running_.end()) {
    self = *it;
    running_.erase(it);
  } else {
    self = op->shared_from_this();
  }
  if (op->has_outstanding_requests()) zombies_.push_back(self);
  CommState& c = *op->comm();
  if (!c.queue.empty() && c.queue.front().get() == op) {
    c.queue.pop_front();
    // Start the next call of this communicator (one that finishes at once pops itself and starts the next).
    while (!c.queue.empty() && !c.queue.front()->started()) {
      auto next = c.queue.front();
      running_.push_back(next);
      next->start();
    }
  }
}

std::string UcxWorker::peer_name(const CommState& comm, int group_rank) const {
  if (group_rank < 0 || group_rank >= int(comm.members.size())) return "rank " + std::to_string(group_rank);
  const int g = comm.members[size_t(group_rank)];
  const PeerInfo& p = peers_[size_t(g)];
  std::ostringstream os;
  os << "rank " << group_rank;
  if (comm.id != 0)
    os << " (global rank " << g << ", pid " << p.pid << " on " << p.host << ")";
  else
    os << " (pid " << p.pid << " on " << p.host << ")";
  return os.str();
}

std::exception_ptr UcxWorker::dead_member_error(const CommState& comm, const std::string& what) const {
  for (int r = 0; r < comm.size; ++r) {
    const PeerInfo& p = peers_[size_t(comm.members[size_t(r)])];
    if (!p.dead.empty())
      return make_error(ErrorCode::kRemoteError, str_cat(what, ": ", peer_name(comm, r), " died earlier: ", p.dead));
  }
  return nullptr;
}

void UcxWorker::fail_comm_locked(CommState& comm, ErrorCode code, const std::string& reason, bool notify,
                                 UcxOp* origin) {
  std::string full_reason = reason;
  if (origin != nullptr) full_reason = origin->description() + ": " + reason;
  if (!comm.failed) {
    comm.failed = true;
    comm.failed_code = code;
    comm.failed_reason = full_reason;
  }
  // Timeout and abort errors quote this rank's last calls (not sent to the peers: they quote their own).
  const std::string recent =
      comm.recorder != nullptr && (code == ErrorCode::kTimeout || code == ErrorCode::kRemoteError)
          ? "; " + comm.recorder->describe_recent()
          : std::string();
  std::vector<std::shared_ptr<UcxOp>> victims;
  for (auto& op : running_)
    if (op->comm().get() == &comm) victims.push_back(op);
  for (auto& op : comm.queue)
    if (std::find(victims.begin(), victims.end(), op) == victims.end()) victims.push_back(op);
  comm.queue.clear();
  for (auto& op : victims) {
    if (op.get() == origin) {
      op->abort(make_error(code, full_reason + recent));
    } else if (op->started()) {
      op->abort(make_error(code, origin != nullptr
                                     ? str_cat(op->description(), ": failed because ", full_reason, recent)
                                     : str_cat(op->description(), ": ", reason, recent)));
    } else {
      op->abort(make_error(code, str_cat(op->description(), ": not run because an earlier call failed: ",
                                         origin != nullptr ? full_reason : reason, recent)));
    }
  }
  if (notify) send_abort_locked(comm, full_reason);
  DT_LOG_DEBUG("UCX ", comm.name, " failed: ", full_reason);
}

void UcxWorker::reap_locked() {
  if (!zombies_.empty())
    zombies_.erase(std::remove_if(zombies_.begin(), zombies_.end(),
                                  [](const auto& op) { return !op->has_outstanding_requests(); }),
                   zombies_.end());
  if (!abort_sends_.empty())
    abort_sends_.erase(std::remove_if(abort_sends_.begin(), abort_sends_.end(),
                                      [](const auto& a) {
                                        if (!a->done) return false;
                                        if (a->request != nullptr) ucp_request_free(a->request);
                                        return true;
                                      }),
                       abort_sends_.end());
}

void UcxWorker::advance_dirty_locked(Clock::time_point now) {
  // The batch vector keeps its capacity from call to call (no allocation per round of progress); a nested call
  // (an op's advance never makes one today) would fall back to a vector of its own.
  std::vector<UcxOp*> nested;
  std::vector<UcxOp*>& batch = active_batches_.empty() ? dirty_batch_ : nested;
  active_batches_.push_back(&batch);
  while (!dirty_.empty()) {
    batch.swap(dirty_);
    for (size_t i = 0; i < batch.size(); ++i) {
      UcxOp* op = batch[i];
      if (op == nullptr) continue;  // finished by an earlier op of the batch (op_done_locked)
      op->dirty = false;
      op->advance(now);  // may finish (and destroy) op: it is not touched again
    }
    batch.clear();
  }
  active_batches_.pop_back();
}

bool UcxWorker::progress_locked(Clock::time_point now) {
  bool moved = false;
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) moved = true;
  if (handle_cma_failures_locked()) moved = true;
  if (abort_recv_->done && poll_abort_locked()) moved = true;
  if (!dirty_.empty()) {
    moved = true;
    advance_dirty_locked(now);
  }
  reap_locked();
  check_health_locked(now);
  return moved;
}

void UcxWorker::check_health_locked(Clock::time_point now) {
  if (running_.empty() || now < next_health_) return;
  next_health_ = now + std::chrono::milliseconds(100);
  bool stalled = false;
  auto running = running_;
  for (auto& op : running) {
    if (op->finished()) continue;
    if (now > op->deadline()) {
      op->fail(ErrorCode::kTimeout, str_cat("did not complete within ", op->timeout().count() / 1000.0,
                                            " s; still waiting for: ", op->pending_summary()));
      continue;
    }
    if (now - op->last_progress() >= stall_threshold_) {
      stalled = true;
      if (find_mismatch_locked(*op)) continue;
    }
  }
  if (stalled && now >= next_liveness_) {
    next_liveness_ = now + std::chrono::milliseconds(500);
    check_peers_locked();
  }
}

bool UcxWorker::find_mismatch_locked(UcxOp& op) {
  if (!op.started() || op.finished()) return false;
  const CommState& c = *op.comm();
  const CollectiveArgs& a = op.args();
  const bool p2p = a.kind == CollectiveKind::kSend || a.kind == CollectiveKind::kRecv;
  // A send's number counts this rank's sends to the peer; the peer's messages here count its sends to this rank: a
  // different sequence, so they say nothing about it (a peer may send i64 ids one way while f32 data comes back).
  if (a.kind == CollectiveKind::kSend) return false;
  const uint32_t kind = tag_kind(a.kind), send_kind = uint32_t(CollectiveKind::kSend);
  for (int peer : op.pending_peers()) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h m =
        ucp_tag_probe_nb(worker_, make_tag(0, c.id, op.seq(), 0, uint32_t(peer), 0), kCallMask, 0, &info);
    if (m == nullptr) continue;
    const uint32_t k = tag_kind_of(info.sender_tag);
    // The abort channel, and point-to-point messages against collectives (separate sequence spaces), say nothing.
    if (k == kAbortKind || (k == send_kind) != p2p) continue;
    if (k == kind && tag_sig(info.sender_tag) == op.signature()) continue;  // this very call's, not yet taken
    std::string what;
    if (k != kind)
      what = str_cat(peer_name(c, peer), " called ", collective_kind_name(CollectiveKind(k)),
                     " as the same call of this communicator (mismatched collective calls)");
    else if (p2p)
      what = str_cat(peer_name(c, peer), " sent a message of another dtype (mismatched send and recv)");
    else
      what = str_cat(peer_name(c, peer),
                     " made the same call with another dtype, reduce op or root (mismatched collective calls)");
    op.fail(ErrorCode::kInvalidArgument, what);
    return true;
  }
  return false;
}

void UcxWorker::check_peers_locked() {
  std::vector<int> newly_dead;
  for (int g = 0; g < size_; ++g) {
    PeerInfo& p = peers_[size_t(g)];
    if (g == rank_ || !p.same_host || !p.dead.empty()) continue;
    std::string why = process_dead_reason(p.pid, p.start_time);
    if (!why.empty()) {
      p.dead = why;
      any_dead_ = true;
      newly_dead.push_back(g);
      DT_LOG_WARN("UCX: rank ", g, " (pid ", p.pid, ") died: ", why);
    }
  }
  fail_dead_peers_locked(newly_dead);
}

bool UcxWorker::handle_cma_failures_locked() {
  if (!cma_peer_failure_pending()) return false;
  std::vector<int> newly_dead;
  for (pid_t pid : take_cma_peer_failures())
    for (int g = 0; g < size_; ++g) {
      PeerInfo& p = peers_[size_t(g)];
      if (g == rank_ || !p.same_host || p.pid != int64_t(pid) || !p.dead.empty()) continue;
      p.dead = "its process " + std::to_string(pid) + " is gone (a copy from its memory failed)";
      any_dead_ = true;
      newly_dead.push_back(g);
      DT_LOG_WARN("UCX: rank ", g, " (pid ", pid, ") died: ", p.dead);
    }
  if (newly_dead.empty()) return false;
  fail_dead_peers_locked(newly_dead);
  return true;
}

// Note [A peer that left the call]
// A direct copy into or out of a live peer's memory fails (EFAULT) when that peer has already given up on the call
// (a third rank died under it, or it timed out) and its buffers are gone. The failure is a symptom: the peer's
// abort notice names the cause and is on its way, or the dead rank is about to be seen by this rank's own checks.
// The failing rank waits for either, bounded by the stall threshold, so that every survivor reports the cause (the
// dead rank) rather than "Bad address"; without one, the copy's own error stands.
bool UcxWorker::await_group_failure_locked(const CommState& comm) {
  const auto deadline = Clock::now() + stall_threshold_;
  while (!comm.failed && !stop_.load()) {
    for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) {
    }
    handle_cma_failures_locked();
    if (abort_recv_->done) poll_abort_locked();
    check_peers_locked();
    if (comm.failed || Clock::now() >= deadline) break;
    ::usleep(200);
  }
  return comm.failed;
}

void UcxWorker::fail_dead_peers_locked(const std::vector<int>& newly_dead) {
  if (newly_dead.empty()) return;
  auto running = running_;
  for (auto& op : running) {
    if (op->finished()) continue;
    CommState& c = *op->comm();
    for (int g : newly_dead) {
      auto it = std::find(c.members.begin(), c.members.end(), g);
      if (it == c.members.end()) continue;
      const int r = int(it - c.members.begin());
      fail_comm_locked(c, ErrorCode::kRemoteError,
                       str_cat(peer_name(c, r), " died (", peers_[size_t(g)].dead, ") while this call was pending"),
                       true);
      break;
    }
  }
}

}  // namespace dt::ucx
