// UcxWorker's abort channel (Note [UCX failure detection] in worker.h): a reserved tag kind on which a rank that
// fails a communicator tells the other members, and the receive that is always posted for it.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "collectives/ucx/tag.h"
#include "collectives/ucx/worker.h"
#include "core/logging.h"

namespace dt::ucx {

const char* const UcxWorker::kDeathNotice = "dead ";

void UcxWorker::send_abort_locked(const CommState& comm, const std::string& text) {
  const std::string payload = std::to_string(comm.id) + "\n" + text;
  for (int r = 0; r < comm.size; ++r) {
    const int g = comm.members[size_t(r)];
    if (g != rank_ && peers_[size_t(g)].dead.empty()) post_abort_locked(g, payload);
  }
}

void UcxWorker::post_abort_locked(int g, const std::string& payload) {
  auto a = std::make_unique<AbortSend>();
  a->payload = payload.substr(0, AbortRecv::kMax);
  ucp_request_param_t p;
  std::memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE;
  p.cb.send = abort_send_cb;
  p.user_data = a.get();
  p.datatype = ucp_dt_make_contig(1);
  void* r = ucp_tag_send_nbx(eps_[size_t(g)], a->payload.data(), a->payload.size(),
                             make_tag(kAbortKind, 0, 0, 0, uint32_t(rank_), 0), &p);
  if (UCS_PTR_IS_PTR(r)) {
    a->request = r;
    abort_sends_.push_back(std::move(a));
  }
}

void UcxWorker::abort_send_cb(void* /*request*/, ucs_status_t /*status*/, void* user_data) {
  static_cast<AbortSend*>(user_data)->done = true;
}

void UcxWorker::abort_recv_cb(void* /*request*/, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user_data) {
  auto* a = static_cast<AbortRecv*>(user_data);
  a->done = true;
  a->status = status;
  if (info != nullptr) a->info = *info;
}

bool UcxWorker::poll_abort_locked() {
  bool got = false;
  for (;;) {
    AbortRecv& a = *abort_recv_;
    if (a.posted && !a.done) return got;
    if (a.posted && a.done) {
      if (a.request != nullptr) ucp_request_free(a.request);
      a.request = nullptr;
      a.posted = false;
      if (a.status == UCS_OK) {
        got = true;
        handle_abort_locked(std::string(a.buf, std::min(a.info.length, AbortRecv::kMax)),
                            int(tag_src(a.info.sender_tag)));
      } else if (a.status == UCS_ERR_CANCELED) {
        return got;
      }
    }
    if (stop_.load()) return got;
    a.done = false;
    a.info = {};
    ucp_request_param_t p;
    std::memset(&p, 0, sizeof(p));
    // No immediate completion (see UcxOp::post): the callback reports the sender and the length.
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE |
                     UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = abort_recv_cb;
    p.user_data = &a;
    p.datatype = ucp_dt_make_contig(1);
    void* r = ucp_tag_recv_nbx(worker_, a.buf, AbortRecv::kMax, make_tag(kAbortKind, 0, 0, 0, 0, 0), kKindMask, &p);
    if (UCS_PTR_IS_ERR(r) || r == nullptr) {
      DT_LOG_WARN("UCX: cannot post the abort-channel receive: ", ucs_status_string(UCS_PTR_STATUS(r)));
      return got;
    }
    a.posted = true;
    a.request = r;
  }
}

void UcxWorker::handle_abort_locked(const std::string& message, int from) {
  size_t nl = message.find('\n');
  if (nl == std::string::npos) return;
  if (message.rfind(kDeathNotice, 0) == 0) {  // "dead G1 G2 ..\nwhy1\nwhy2 ..": Note [A dead rank fails every group]
    std::istringstream ranks(message.substr(std::strlen(kDeathNotice), nl - std::strlen(kDeathNotice)));
    std::istringstream whys(message.substr(nl + 1));
    std::vector<int> newly_dead;
    long g = 0;
    std::string why;
    while (ranks >> g && std::getline(whys, why)) {
      if (g < 0 || g >= size_ || g == rank_ || !peers_[size_t(g)].dead.empty()) continue;
      peers_[size_t(g)].dead = str_cat(why, ", as global rank ", from, " saw");
      any_dead_ = true;
      DT_LOG_WARN("UCX: rank ", g, " died: ", peers_[size_t(g)].dead);
      newly_dead.push_back(int(g));
    }
    fail_dead_peers_locked(newly_dead, /*announce=*/false);
    return;
  }
  const uint32_t id = uint32_t(std::strtoul(message.substr(0, nl).c_str(), nullptr, 10));
  const std::string text = message.substr(nl + 1);
  bool known = false;
  for (auto& w : comms_) {
    auto c = w.lock();
    if (!c || c->id != id) continue;
    known = true;
    if (c->failed) continue;
    auto it = std::find(c->members.begin(), c->members.end(), from);
    if (it == c->members.end()) continue;
    const int r = int(it - c->members.begin());
    fail_comm_locked(*c, ErrorCode::kRemoteError, str_cat(peer_name(*c, r), " reported: ", text), false);
  }
  // A member that failed before this process finished creating the communicator (split() draws the id from the
  // store, so a fast peer can fail its first call on it meanwhile): keep the news for register_comm().
  if (!known && early_aborts_.size() < 1024) early_aborts_.emplace(id, std::make_pair(from, text));
}

}  // namespace dt::ucx
