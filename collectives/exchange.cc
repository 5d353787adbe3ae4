#include "collectives/exchange.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace dt {

std::vector<int64_t> all_gather_ints(Communicator& comm, const std::vector<int64_t>& mine) {
  const int n = comm.size();
  if (n == 1) return mine;
  const int64_t k = int64_t(mine.size());
  const Device device = comm.home_device();
  Tensor send = Tensor::from_data<int64_t>(mine, {k});
  Tensor recv = Tensor::empty({int64_t(n) * k}, DType::i64, device);
  if (!device.is_cpu()) send = send.to(device);
  comm.all_gather(send, recv)->wait();  // also when k == 0: a peer that passed values then fails at once
  if (k == 0) return {};
  if (!device.is_cpu()) recv = recv.to(Device::cpu());
  const int64_t* p = recv.data<int64_t>();
  return std::vector<int64_t>(p, p + int64_t(n) * k);
}

std::vector<int> split_members(const std::vector<int64_t>& color_key, int64_t color) {
  DT_ASSERT(color_key.size() % 2 == 0, "split_members: ", color_key.size(), " values are not (color, key) pairs");
  if (color < 0) return {};
  std::vector<std::pair<int64_t, int>> order;  // (key, parent rank)
  for (size_t r = 0; r < color_key.size() / 2; ++r)
    if (color_key[2 * r] == color) order.emplace_back(color_key[2 * r + 1], int(r));
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  members.reserve(order.size());
  for (const auto& kr : order) members.push_back(kr.second);
  return members;
}

}  // namespace dt
