#include "collectives/debug_communicator.h"

#include <sstream>

#include "collectives/call_signature.h"
#include "collectives/exchange.h"
#include "core/config.h"
#include "core/error.h"

namespace dt {

bool debug_collectives_enabled() { return config::get_bool(config::Var::kDebugCollectives); }

CommunicatorPtr maybe_wrap_debug(CommunicatorPtr comm) {
  if (comm == nullptr || !debug_collectives_enabled() || dynamic_cast<DebugCommunicator*>(comm.get()) != nullptr)
    return comm;
  return std::make_shared<DebugCommunicator>(std::move(comm));
}

DebugCommunicator::DebugCommunicator(CommunicatorPtr inner) : inner_(std::move(inner)) {
  DT_CHECK_ARG(inner_ != nullptr, "DebugCommunicator: no communicator to wrap");
  forward_to(*inner_);
}

std::shared_ptr<Communicator> DebugCommunicator::split(int color, int key) {
  CommunicatorPtr sub = inner_->split(color, key);
  if (sub == nullptr || dynamic_cast<DebugCommunicator*>(sub.get()) != nullptr) return sub;
  return std::make_shared<DebugCommunicator>(std::move(sub));
}

WorkPtr DebugCommunicator::enqueue(const CollectiveArgs& args) {
  const bool p2p = args.kind == CollectiveKind::kSend || args.kind == CollectiveKind::kRecv;
  const int n = size();
  if (p2p || n == 1) return inner_->submit(args);
  // Every rank contributes (sequence, signature); all must agree (CallSignature leaves out what may differ).
  constexpr int kFields = 1 + CallSignature::kInts;
  std::vector<int64_t> mine(kFields);
  mine[0] = int64_t(call_sequence());
  CallSignature::of(args).to_ints(mine.data() + 1);
  const std::vector<int64_t> all = all_gather_ints(*inner_, mine);
  auto field = [&](int r, int f) { return all[size_t(r) * kFields + size_t(f)]; };
  std::vector<int> differ;
  for (int r = 1; r < n; ++r)
    for (int f = 0; f < kFields; ++f)
      if (field(r, f) != field(0, f)) {
        differ.push_back(r);
        break;
      }
  if (!differ.empty()) {
    // "all_reduce(count=4, f32, sum) as call #3" for rank r.
    auto call_of = [&](int r) {
      return str_cat(CallSignature::from_ints(all.data() + size_t(r) * kFields + 1).describe(), " as call #",
                     field(r, 0));
    };
    std::ostringstream os;
    os << "mismatched collectives on " << backend_name() << " group of " << n << ": rank 0 called " << call_of(0);
    const std::vector<int> g = global_ranks();
    for (int r : differ) os << "; rank " << r << " (global " << g[size_t(r)] << ") called " << call_of(r);
    DT_THROW(InvalidArgument, os.str());
  }
  return inner_->submit(args);
}

}  // namespace dt
