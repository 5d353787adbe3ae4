#include "collectives/exchange.h"

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

}  // namespace dt
