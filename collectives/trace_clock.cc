#include "collectives/trace_clock.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/config.h"
#include "core/trace.h"

namespace dt {

ClockOffset estimate_clock_offset(Communicator& world, int rounds, int64_t* max_uncertainty_ns) {
  if (!world.supports(Device::cpu())) return {0, -1};
  const int rank = world.rank(), size = world.size();
  const Device cpu = Device::cpu();
  ClockOffset best{0, rank == 0 ? 0 : std::numeric_limits<int64_t>::max()};
  int64_t worst = 0;
  int64_t msg[2] = {0, 0};
  if (rank == 0) {
    for (int r = 1; r < size; ++r) {
      for (int k = 0; k < rounds; ++k) {
        world.recv(msg, 1, DType::i64, r, cpu)->wait();
        msg[0] = trace::now_ns();
        world.send(msg, 1, DType::i64, r, cpu)->wait();
      }
      world.recv(msg, 2, DType::i64, r, cpu)->wait();  // its result: {offset, uncertainty}
      worst = std::max(worst, msg[1]);
    }
  } else {
    for (int k = 0; k < rounds; ++k) {
      const int64_t t1 = trace::now_ns();
      msg[0] = t1;
      world.send(msg, 1, DType::i64, 0, cpu)->wait();
      world.recv(msg, 1, DType::i64, 0, cpu)->wait();
      const int64_t t4 = trace::now_ns();
      const int64_t half = (t4 - t1) / 2;
      if (half < best.uncertainty_ns) best = {msg[0] - (t1 + half), half};
    }
    msg[0] = best.offset_ns;
    msg[1] = best.uncertainty_ns;
    world.send(msg, 2, DType::i64, 0, cpu)->wait();
    worst = best.uncertainty_ns;
  }
  if (max_uncertainty_ns) *max_uncertainty_ns = worst;
  return best;
}

void start_trace_from_env(Communicator& world) {
  if (!config::is_set(config::Var::kTrace) || trace::started()) return;
  const std::string dir = config::get_string(config::Var::kTrace);
  trace::start(
      {.dir = dir, .rank = world.global_ranks().at(size_t(world.rank())), .world_size = world.size(), .capacity = 0});
  int64_t worst = 0;
  const ClockOffset c = estimate_clock_offset(world, 16, &worst);
  trace::set_clock_offset(c.offset_ns, c.uncertainty_ns);
  if (world.rank() == 0)
    std::fprintf(stderr,
                 "dtensor: tracing every rank to %s (DT_TRACE; %lld events kept per rank), clocks aligned to "
                 "rank 0's within %.1f us\n",
                 dir.c_str(), (long long)trace::stats().capacity, double(worst) / 1e3);
}

}  // namespace dt
