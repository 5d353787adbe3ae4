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
#include "collectives/ucx/process_info.h"
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
  DT_LOG_INFO("UCX worker up: rank ", rank_, "/", size_, ", ", local, " rank(s) on this host, spin ", spin_.count(),
              " us");
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
    // Close the endpoints (flushing what is in flight), giving up after a second: a dead or unreachable peer never
    // answers. A close still in flight is released all the same: ucp_worker_destroy completes it, and asserts (abort)
    // on one the user did not release (a link cut between hosts left every rank with one).
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
      ucp_request_free(r);
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

}  // namespace dt::ucx
