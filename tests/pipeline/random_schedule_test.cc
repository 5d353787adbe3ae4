// pipeline/: random schedules against an independent executor. Valid schedules come from random topological
// orders (any ready action of any rank, picked at random, so transfers land anywhere legal); invalid candidates
// from mutating valid ones. The executor below runs a schedule with one thread per rank, real blocking mailboxes
// and values that carry the data dependencies; it shares no code with the validator, and is the oracle: the
// validator must accept exactly the schedules the executor runs to the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_builders.h"
#include "pipeline/validate.h"
#include "tests/pipeline/random_schedules.h"

namespace dt::pipeline {
namespace {

using K = ActionKind;

// ---- The model the executor computes: a value per (stage, microbatch), forward and backward. ----

uint64_t mix(uint64_t x) {  // murmur3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
uint64_t model_input(int mb) { return mix(1000 + mb); }
uint64_t stage_forward(int stage, uint64_t x) { return mix(x * 31 + stage); }
uint64_t loss_gradient(uint64_t y) { return mix(y ^ 0xabcdef); }
uint64_t stage_backward(int stage, uint64_t x, uint64_t grad) { return mix(grad * 7 + x + stage); }

// What every stage must see, computed one microbatch at a time: input[s][mb] and output_grad[s][mb].
struct Reference {
  std::vector<std::vector<uint64_t>> input, output_grad;
  Reference(int stages, int mbs) : input(stages, std::vector<uint64_t>(mbs)), output_grad(input) {
    for (int mb = 0; mb < mbs; ++mb) {
      uint64_t x = model_input(mb);
      for (int s = 0; s < stages; ++s) {
        input[s][mb] = x;
        x = stage_forward(s, x);
      }
      uint64_t g = loss_gradient(x);
      for (int s = stages - 1; s >= 0; --s) {
        output_grad[s][mb] = g;
        g = stage_backward(s, input[s][mb], g);
      }
    }
  }
};

// ---- Mailboxes: a message per (direction, receiving stage, microbatch); receives block with a deadline. ----

using Tag = std::tuple<int, int, int>;  // (0 activation / 1 gradient, the receiving stage, microbatch)

class Mailboxes {
 public:
  Mailboxes(int ranks, std::chrono::milliseconds deadline) : waiting_for_(ranks), ranks_(ranks), deadline_(deadline) {}

  void post(const Tag& tag, uint64_t value) {
    std::lock_guard lock(mu_);
    if (!sent_.insert(tag).second) return abort_locked("a message is sent twice");
    box_[tag] = value;
    for (auto& w : waiting_for_) {
      if (w != tag) continue;
      w.reset();  // that rank is no longer stuck
      --waiting_;
    }
    cv_.notify_all();
  }
  std::optional<uint64_t> receive(int rank, const Tag& tag) {
    std::unique_lock lock(mu_);
    if (!aborted_ && !box_.count(tag)) {
      waiting_for_[rank] = tag;
      ++waiting_;
      check_stuck_locked();
      if (!cv_.wait_until(lock, std::chrono::steady_clock::now() + deadline_,
                          [&] { return aborted_ || box_.count(tag) > 0; })) {
        abort_locked("timeout: rank " + std::to_string(rank) + " waited too long");
      }
    }
    if (aborted_) return std::nullopt;
    const auto it = box_.find(tag);
    const uint64_t value = it->second;
    box_.erase(it);
    return value;
  }
  void finish() {
    std::lock_guard lock(mu_);
    ++finished_;
    check_stuck_locked();
  }
  void fail(const std::string& why) {
    std::lock_guard lock(mu_);
    abort_locked(why);
  }
  // The error, or "" when every rank finished and every message was received.
  std::string outcome() {
    std::lock_guard lock(mu_);
    if (!aborted_ && !box_.empty()) return "a message is never received";
    return error_;
  }

 private:
  // Every rank has finished or waits for a message nobody has posted: none ever will.
  void check_stuck_locked() {
    if (waiting_ > 0 && waiting_ + finished_ == ranks_) abort_locked("deadlock");
  }
  void abort_locked(const std::string& why) {
    if (!aborted_) error_ = why;
    aborted_ = true;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Tag, uint64_t> box_;
  std::set<Tag> sent_;
  std::vector<std::optional<Tag>> waiting_for_;
  int ranks_, waiting_ = 0, finished_ = 0;
  bool aborted_ = false;
  std::string error_;
  std::chrono::milliseconds deadline_;
};

// ---- One rank's thread: runs its list, checking each action's inputs by value. ----

class RankRun {
 public:
  RankRun(const Schedule& s, const Reference& ref, Mailboxes& net, int rank, bool fsdp)
      : s_(s), ref_(ref), net_(net), r_(rank), fsdp_(fsdp) {}

  // The first thing wrong, or "".
  std::string run() {
    for (const Action& a : s_.actions[r_]) {
      const std::string error = step(a);
      if (!error.empty()) return to_string(a) + ": " + error;
    }
    for (int s = 0; s < s_.num_stages; ++s) {
      if (s_.stage_rank[s] != r_) continue;
      for (int mb = 0; mb < s_.num_microbatches; ++mb) {
        if (!output_.count({s, mb}) || !backward_.count({s, mb})) return "a microbatch is not run through";
      }
      if (fsdp_ && !reduced_.count(s)) return "a stage's gradients are never reduced";
    }
    return pending_weight_.empty() ? "" : "an I without its W";
  }

 private:
  using Key = std::pair<int, int>;  // (stage, microbatch)

  int rank_of(int stage) const { return stage >= 0 && stage < s_.num_stages ? s_.stage_rank[stage] : -1; }

  std::string step(const Action& a) {
    const int s = a.stage, mb = a.microbatch, S = s_.num_stages;
    if (s < 0 || s >= S || s_.stage_rank[s] != r_) return "not this rank's stage";
    if (is_fsdp(a.kind) != (mb == -1) || mb >= s_.num_microbatches) return "bad microbatch";
    if (is_compute(a.kind) && fsdp_ && !unsharded_.count(s)) return "compute on sharded parameters";
    const Key key{s, mb};
    switch (a.kind) {
      case K::kForward: {
        if (output_.count(key)) return "forward twice";
        std::optional<uint64_t> x;
        if (s == 0) x = model_input(mb);
        if (s > 0 && rank_of(s - 1) == r_ && output_.count({s - 1, mb})) x = output_[{s - 1, mb}];
        if (s > 0 && rank_of(s - 1) != r_ && received_.count({0, s, mb})) x = received_[{0, s, mb}];
        if (!x || *x != ref_.input[s][mb]) return "wrong or missing input";
        input_[key] = *x;
        output_[key] = stage_forward(s, *x);
        if (int(output_.size() - backward_.size()) > s_.memory_bound[r_]) return "over the memory bound";
        return "";
      }
      case K::kBackward:
      case K::kBackwardInput: {
        if (!output_.count(key) || backward_.count(key)) return "backward before forward, or twice";
        std::optional<uint64_t> g;
        if (s == S - 1) g = loss_gradient(output_[key]);
        if (s < S - 1 && rank_of(s + 1) == r_ && input_grad_.count({s + 1, mb})) g = input_grad_[{s + 1, mb}];
        if (s < S - 1 && rank_of(s + 1) != r_ && received_.count({1, s, mb})) g = received_[{1, s, mb}];
        if (!g || *g != ref_.output_grad[s][mb]) return "wrong or missing output gradient";
        backward_.insert(key);
        input_grad_[key] = stage_backward(s, input_[key], *g);
        if (a.kind == K::kBackwardInput) pending_weight_[key] = *g;
        if (a.kind == K::kBackward) ++gradients_[s];
        return "";
      }
      case K::kBackwardWeight: {
        const auto it = pending_weight_.find(key);
        if (it == pending_weight_.end() || it->second != ref_.output_grad[s][mb]) return "W without its I";
        pending_weight_.erase(it);
        ++gradients_[s];
        return "";
      }
      case K::kSendF:
        if (rank_of(s + 1) < 0 || rank_of(s + 1) == r_ || !output_.count(key)) return "bad send";
        net_.post({0, s + 1, mb}, output_[key]);
        return "";
      case K::kSendB:
        if (rank_of(s - 1) < 0 || rank_of(s - 1) == r_ || !input_grad_.count(key)) return "bad send";
        net_.post({1, s - 1, mb}, input_grad_[key]);
        return "";
      case K::kRecvF:
      case K::kRecvB: {
        const int from = a.kind == K::kRecvF ? s - 1 : s + 1, dir = a.kind == K::kRecvF ? 0 : 1;
        if (rank_of(from) < 0 || rank_of(from) == r_ || received_.count({dir, s, mb})) return "bad receive";
        const std::optional<uint64_t> v = net_.receive(r_, {dir, s, mb});
        if (!v) return "aborted while waiting";
        received_[{dir, s, mb}] = *v;
        return "";
      }
      case K::kUnshard:
        return unsharded_.insert(s).second ? "" : "unshard twice";
      case K::kReshard:
        return unsharded_.erase(s) ? "" : "reshard of a sharded stage";
      case K::kReduceGrad:
        if (gradients_[s] != s_.num_microbatches) return "reduce before the gradients";
        return reduced_.insert(s).second ? "" : "reduce twice";
    }
    return "unknown action";
  }

  const Schedule& s_;
  const Reference& ref_;
  Mailboxes& net_;
  const int r_;
  const bool fsdp_;
  std::map<Key, uint64_t> input_, output_, input_grad_, pending_weight_;
  std::map<std::tuple<int, int, int>, uint64_t> received_;  // (direction, stage, microbatch)
  std::set<Key> backward_;
  std::map<int, int> gradients_;
  std::set<int> unsharded_, reduced_;
};

// Runs the schedule, one thread per rank; "" when every rank ran through with the right values.
std::string execute(const Schedule& s) {
  if (s.num_ranks < 1 || int(s.actions.size()) != s.num_ranks || int(s.memory_bound.size()) != s.num_ranks ||
      int(s.stage_rank.size()) != s.num_stages) {
    return "malformed";
  }
  bool fsdp = false;
  for (const auto& list : s.actions) {
    for (const Action& a : list) fsdp = fsdp || is_fsdp(a.kind);
  }
  const Reference ref(s.num_stages, s.num_microbatches);
  Mailboxes net(s.num_ranks, std::chrono::seconds(5));
  std::vector<std::thread> threads;
  for (int r = 0; r < s.num_ranks; ++r) {
    threads.emplace_back([&, r] {
      const std::string error = RankRun(s, ref, net, r, fsdp).run();
      if (!error.empty()) net.fail("rank " + std::to_string(r) + ": " + error);
      net.finish();
    });
  }
  for (auto& t : threads) t.join();
  return net.outcome();
}

// ---- Mutations. ----

struct Mutant {
  Schedule schedule;
  std::string kind;
  std::string names;  // for the mutations that always break the schedule: what the refusal must name
};

Mutant mutate(const Schedule& valid, Rng& rng) {
  Mutant m{.schedule = valid, .kind = "", .names = ""};
  auto& lists = m.schedule.actions;
  const int r = rng.below(m.schedule.num_ranks);
  auto& list = lists[r];
  std::vector<int> recvs;
  for (int i = 0; i < int(list.size()); ++i) {
    if (is_recv(list[i].kind)) recvs.push_back(i);
  }
  std::vector<int> sends;
  for (int i = 0; i < int(list.size()); ++i) {
    if (is_send(list[i].kind)) sends.push_back(i);
  }
  const int choice = rng.below(7);
  if (choice == 6 && !sends.empty()) {
    const int i = sends[rng.below(int(sends.size()))];
    const int j = i + rng.below(int(list.size()) - i);
    m.kind = "delay a send";
    const Action send = list[i];
    list.erase(list.begin() + i);
    list.insert(list.begin() + j, send);
    return m;
  }
  if (choice == 1 && !recvs.empty()) {
    const int i = recvs[rng.below(int(recvs.size()))];
    m.kind = "drop a receive";
    m.names = to_string(list[i]);
    list.erase(list.begin() + i);
    return m;
  }
  if (choice == 2 && !recvs.empty()) {
    const int i = recvs[rng.below(int(recvs.size()))];
    const Action recv = list[i];
    const auto consumer = [&](const Action& a) {
      return a.stage == recv.stage && a.microbatch == recv.microbatch &&
             (recv.kind == K::kRecvF ? a.kind == K::kForward : a.kind == K::kBackward || a.kind == K::kBackwardInput);
    };
    const int c = int(std::find_if(list.begin(), list.end(), consumer) - list.begin());
    m.kind = "move a receive after its compute";
    m.names = to_string(recv);
    list.insert(list.begin() + c + 1, recv);
    list.erase(list.begin() + i);
    return m;
  }
  if (choice == 3 && list.size() >= 2) {
    const int i = rng.below(int(list.size()));
    for (int j = 0; j < int(list.size()); ++j) {
      if (list[j].kind == list[i].kind && list[j].stage == list[i].stage && list[j].microbatch != list[i].microbatch) {
        m.kind = "swap microbatch ids";
        std::swap(list[i].microbatch, list[j].microbatch);
        return m;
      }
    }
  }
  if (choice == 4) {
    m.kind = "lower a memory bound";
    m.schedule.memory_bound[r] = std::max(0, m.schedule.memory_bound[r] - 1);
    return m;
  }
  if (choice == 5 && !list.empty()) {
    m.kind = "move an action";
    const int i = rng.below(int(list.size())), j = rng.below(int(list.size()));
    const Action a = list[i];
    list.erase(list.begin() + i);
    list.insert(list.begin() + j, a);
    return m;
  }
  m.kind = "swap two actions";
  if (list.size() >= 2) {
    const int i = rng.below(int(list.size()) - 1);
    const int j = rng.chance(0.5) ? i + 1 : i + 1 + rng.below(int(list.size()) - i - 1);
    std::swap(list[i], list[j]);
  }
  return m;
}

std::string refusal_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(PipelineRandom, ValidatorAgreesWithTheExecutor) {
  Rng rng{20240501};
  int valid = 0, mutants_valid = 0, mutants_invalid = 0, deadlocks = 0;
  std::map<std::string, std::pair<int, int>> by_kind;  // mutation -> (still valid, refused)
  for (int n = 0; n < 1000; ++n) {
    const Schedule s = random_schedule(rng);
    const std::string text = format_schedule(s);
    SCOPED_TRACE(text);
    ASSERT_EQ(parse_schedule(text), s);
    ASSERT_EQ(refusal_of(s), "");
    ASSERT_EQ(execute(s), "");
    ++valid;
    const Mutant m = mutate(s, rng);
    SCOPED_TRACE(m.kind + ":\n" + format_schedule(m.schedule));
    const std::string refused = refusal_of(m.schedule), ran = execute(m.schedule);
    // The executor is the oracle: what it runs through must be accepted, what it cannot must be refused.
    ASSERT_EQ(refused.empty(), ran.empty()) << "validator: " << refused << "\nexecutor: " << ran;
    if (!m.names.empty()) {
      EXPECT_NE(refused.find(m.names), std::string::npos) << refused;
    }
    ++(refused.empty() ? mutants_valid : mutants_invalid);
    if (refused.find("deadlock: ") != std::string::npos) {
      ++deadlocks;
      EXPECT_NE(ran.find("deadlock"), std::string::npos) << ran;  // and the executor found the same
    }
    ++(refused.empty() ? by_kind[m.kind].first : by_kind[m.kind].second);
  }
  std::cout << "random schedules: " << valid << " valid (accepted, ran); mutants: " << mutants_valid
            << " still valid (accepted, ran), " << mutants_invalid << " invalid (refused, failed in the executor; "
            << deadlocks << " of them deadlocks)\n";
  for (const auto& [kind, counts] : by_kind) {
    std::cout << "  " << kind << ": " << counts.first << " still valid, " << counts.second << " refused\n";
  }
  EXPECT_GT(mutants_invalid, 300);
  EXPECT_GT(mutants_valid, 10);
  EXPECT_GT(deadlocks, 10);
}

TEST(PipelineRandom, BuiltInsRunInTheExecutor) {
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 3, 4, 5, 8, 9}) {
      for (bool fsdp : {false, true}) {
        for (const std::string& name : schedule_names()) {
          for (int v : name == "interleaved" ? std::vector<int>{2, 3} : std::vector<int>{1}) {
            const Schedule s = by_name(name, p, m, v, {.fsdp = fsdp});
            EXPECT_EQ(execute(s), "") << format_schedule(s);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dt::pipeline
