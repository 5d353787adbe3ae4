#include "tools/dtrun_rendezvous.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "collectives/store/store.h"
#include "core/error.h"
#include "tools/dtrun_generation.h"

namespace dt::dtrun {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> parse_ids(const std::string& text) {
  std::vector<int> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(std::stoi(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) out += (out.empty() ? "" : ",") + std::to_string(id);
  return out;
}

StoreDuration seconds(double s) { return std::chrono::duration_cast<StoreDuration>(std::chrono::duration<double>(s)); }

}  // namespace

Rendezvous::Rendezvous(std::shared_ptr<Store> store, int agent_id, bool host, int min_nodes, int max_nodes,
                       double settle_s, double timeout_s)
    : store_(std::move(store)),
      id_(agent_id),
      host_(host),
      min_nodes_(min_nodes),
      max_nodes_(max_nodes),
      settle_s_(settle_s),
      timeout_s_(timeout_s) {}

int Rendezvous::first_round() {
  if (host_) return 0;
  // Node 0 writes the round it opens; a running job's round is closed: ask for a place in the next one.
  const int round = std::stoi(store_->get("rdzv/round", seconds(timeout_s_)));
  if (!store_->check({key(round, "members")})) return round;
  store_->add(key(round, "waiting"), 1);
  return round + 1;
}

Membership Rendezvous::join(int g) {
  for (;;) {
    if (host_) store_->set("rdzv/round", std::to_string(g));
    const int64_t place = store_->add(key(g, "count"), 1) - 1;
    store_->set(key(g, "place/" + std::to_string(place)), std::to_string(id_));
    if (host_) {
      // Wait for min_nodes, then up to settle_s more for max_nodes (Note [Agent rendezvous]).
      const auto give_up = Clock::now() + seconds(timeout_s_);
      std::optional<Clock::time_point> close_at;
      for (;;) {
        const int64_t n = store_->add(key(g, "count"), 0);
        if (n >= min_nodes_ && !close_at) close_at = Clock::now() + seconds(settle_s_);
        if (n >= max_nodes_ || (close_at && Clock::now() >= *close_at)) break;
        if (!close_at && Clock::now() >= give_up)
          DT_THROW(TimeoutError, "dtrun: only ", n, " node agent(s) joined generation ", g, " within ", timeout_s_,
                   " s; --nnodes asks for at least ", min_nodes_);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      // Closed: the agents registered by now, up to max_nodes, node 0 first.
      const int64_t n = std::min<int64_t>(store_->add(key(g, "count"), 0), max_nodes_);
      std::vector<int> members;
      for (int64_t p = 0; p < n; ++p) members.push_back(std::stoi(store_->get(key(g, "place/" + std::to_string(p)))));
      std::sort(members.begin(), members.end(), [&](int a, int b) {  // node 0 first, then by id
        return (a == id_) != (b == id_) ? a == id_ : a < b;
      });
      store_->set(key(g, "members"), join_ids(members));
      return {g, members, 0, false};
    }
    const std::string text = store_->get(key(g, "members"), seconds(timeout_s_));
    if (text.empty()) return {g, {}, -1, true};
    const std::vector<int> members = parse_ids(text);
    const auto it = std::find(members.begin(), members.end(), id_);
    if (it != members.end()) return {g, members, int(it - members.begin()), false};
    say("node " + std::to_string(id_) + " came after generation " + std::to_string(g) +
        " closed; waiting for the next one");
    store_->add(key(g, "waiting"), 1);
    ++g;
  }
}

void Rendezvous::end_job(int g) {
  store_->set("rdzv/round", std::to_string(g));
  store_->set(key(g, "members"), "");
}

void Rendezvous::announce_success(int g, int members) {
  store_->add(key(g, "succeeded"), 1);
  if (!host_) return;
  const auto give_up = Clock::now() + seconds(timeout_s_);
  while (store_->add(key(g, "succeeded"), 0) < members && !failed(g) && Clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void Rendezvous::announce_failure(int g) { store_->set(key(g, "failed"), std::to_string(id_)); }

bool Rendezvous::failed(int g) { return store_->check({key(g, "failed")}); }

bool Rendezvous::someone_waiting(int g) { return store_->add(key(g, "waiting"), 0) > 0; }

}  // namespace dt::dtrun
