// all_gather, broadcast, all_to_all and all_to_allv on the thread backend: every dtype x size x in-place, on 1-4
// ranks, against the expected layout computed from every rank's inputs.
#include <gtest/gtest.h>

#include "thread_test_util.h"

namespace dt::test {
namespace {

class ThreadData : public ::testing::TestWithParam<int> {};

const std::vector<DType>& data_dtypes() {
  static const std::vector<DType> v = {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32,
                                       DType::i64, DType::i8,   DType::u8,  DType::b8};
  return v;
}

// Inputs: rank r holds `per_rank` elements from seed + r.
template <typename T>
void fill_inputs(Shared& sh, int n, int64_t per_rank, uint64_t seed) {
  for (int r = 0; r < n; ++r) {
    Shared::size_as<T>(sh.in[size_t(r)], per_rank);
    T* x = sh.in_at<T>(r);
    for (int64_t i = 0; i < per_rank; ++i) x[i] = gen<T>(seed + uint64_t(r), i);
  }
}

template <typename T>
HostBuf<T> junk(int64_t count, uint64_t seed) {
  HostBuf<T> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = gen<T>(seed ^ 0xabcdef, i);
  return v;
}

template <typename T>
CaseDriver all_gather_case(int64_t count, bool in_place, uint64_t seed) {
  CaseDriver c;
  c.name = str_cat("all_gather(count=", count, ", ", dtype_name(dtype_of<T>), in_place ? ", in place)" : ")");
  c.prepare = [=](Shared& sh, int n) {
    fill_inputs<T>(sh, n, count, seed);
    Shared::size_as<T>(sh.expect[0], count * n);
    for (int j = 0; j < n; ++j) std::copy_n(sh.in_at<T>(j), count, sh.expect_at<T>(0) + j * count);
  };
  c.run_check = [=](Communicator& comm, Shared& sh) -> std::string {
    const int r = comm.rank(), n = comm.size();
    HostBuf<T> out = junk<T>(count * n, seed);
    HostBuf<T> in(sh.in_at<T>(r), sh.in_at<T>(r) + count);
    const T* send = in.data();
    if (in_place) {
      std::copy(in.begin(), in.end(), out.begin() + r * count);
      send = out.data() + r * count;
    }
    comm.all_gather(send, out.data(), count, dtype_of<T>, Device::cpu())->wait();
    return compare(out.data(), sh.expect_at<T>(0), count * n, "gathered");
  };
  return c;
}

template <typename T>
CaseDriver broadcast_case(int64_t count, int root, uint64_t seed) {
  CaseDriver c;
  c.name = str_cat("broadcast(count=", count, ", ", dtype_name(dtype_of<T>), ", root=", root, ")");
  c.prepare = [=](Shared& sh, int n) { fill_inputs<T>(sh, n, count, seed); };
  c.run_check = [=](Communicator& comm, Shared& sh) -> std::string {
    if (root >= comm.size()) return "";
    HostBuf<T> buf(sh.in_at<T>(comm.rank()), sh.in_at<T>(comm.rank()) + count);
    comm.broadcast(buf.data(), count, dtype_of<T>, root, Device::cpu())->wait();
    return compare(buf.data(), sh.in_at<T>(root), count, "broadcast");
  };
  return c;
}

template <typename T>
CaseDriver all_to_all_case(int64_t count, bool in_place, uint64_t seed) {
  CaseDriver c;
  c.name = str_cat("all_to_all(count=", count, ", ", dtype_name(dtype_of<T>), in_place ? ", in place)" : ")");
  c.prepare = [=](Shared& sh, int n) {
    fill_inputs<T>(sh, n, count * n, seed);
    for (int r = 0; r < n; ++r) {
      Shared::size_as<T>(sh.expect[size_t(r)], count * n);
      for (int j = 0; j < n; ++j) std::copy_n(sh.in_at<T>(j) + r * count, count, sh.expect_at<T>(r) + j * count);
    }
  };
  c.run_check = [=](Communicator& comm, Shared& sh) -> std::string {
    const int r = comm.rank(), n = comm.size();
    HostBuf<T> in(sh.in_at<T>(r), sh.in_at<T>(r) + count * n);
    HostBuf<T> out = junk<T>(count * n, seed);
    T* recv = in_place ? in.data() : out.data();
    comm.all_to_all(in.data(), recv, count, dtype_of<T>, Device::cpu())->wait();
    return compare(recv, sh.expect_at<T>(r), count * n, "exchanged");
  };
  return c;
}

// Uneven counts (zeros included) with gaps between blocks and send blocks in reverse order; the gaps of the
// receive buffer must keep their contents.
struct VLayout {
  std::vector<std::vector<int64_t>> counts;  // counts[i][j]: elements rank i sends to rank j
  std::vector<int64_t> send_displs(int i, int n) const {
    std::vector<int64_t> d(static_cast<size_t>(n));
    int64_t at = 3;
    for (int j = n - 1; j >= 0; --j) {
      d[size_t(j)] = at;
      at += counts[size_t(i)][size_t(j)] + 2;
    }
    return d;
  }
  int64_t send_size(int i, int n) const {
    auto d = send_displs(i, n);
    return d[0] + counts[size_t(i)][0] + 1;
  }
  std::vector<int64_t> recv_displs(int r, int n) const {
    std::vector<int64_t> d(static_cast<size_t>(n));
    int64_t at = 1;
    for (int j = 0; j < n; ++j) {
      d[size_t(j)] = at;
      at += counts[size_t(j)][size_t(r)] + 1;
    }
    return d;
  }
  int64_t recv_size(int r, int n) const {
    auto d = recv_displs(r, n);
    return d[size_t(n - 1)] + counts[size_t(n - 1)][size_t(r)] + 2;
  }
};

VLayout make_vlayout(int n, int64_t base) {
  VLayout l;
  l.counts.assign(size_t(n), std::vector<int64_t>(size_t(n)));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) l.counts[size_t(i)][size_t(j)] = base * ((i * 3 + j * 5 + 1) % 4) / 2;
  return l;
}

template <typename T>
CaseDriver all_to_allv_case(int64_t base, uint64_t seed) {
  CaseDriver c;
  c.name = str_cat("all_to_allv(base=", base, ", ", dtype_name(dtype_of<T>), ")");
  c.prepare = [=](Shared& sh, int n) {
    VLayout l = make_vlayout(n, base);
    for (int i = 0; i < n; ++i) {
      const int64_t sz = l.send_size(i, n);
      Shared::size_as<T>(sh.in[size_t(i)], sz);
      for (int64_t k = 0; k < sz; ++k) sh.in_at<T>(i)[k] = gen<T>(seed + uint64_t(i), k);
    }
    for (int r = 0; r < n; ++r) {
      const int64_t sz = l.recv_size(r, n);
      Shared::size_as<T>(sh.expect[size_t(r)], sz);
      HostBuf<T> j0 = junk<T>(sz, seed + uint64_t(r));
      std::copy(j0.begin(), j0.end(), sh.expect_at<T>(r));
      auto rd = l.recv_displs(r, n);
      for (int j = 0; j < n; ++j) {
        auto sd = l.send_displs(j, n);
        std::copy_n(sh.in_at<T>(j) + sd[size_t(r)], l.counts[size_t(j)][size_t(r)], sh.expect_at<T>(r) + rd[size_t(j)]);
      }
    }
  };
  c.run_check = [=](Communicator& comm, Shared& sh) -> std::string {
    const int r = comm.rank(), n = comm.size();
    VLayout l = make_vlayout(n, base);
    HostBuf<T> in(sh.in_at<T>(r), sh.in_at<T>(r) + l.send_size(r, n));
    HostBuf<T> out = junk<T>(l.recv_size(r, n), seed + uint64_t(r));
    std::vector<int64_t> rc(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) rc[size_t(j)] = l.counts[size_t(j)][size_t(r)];
    comm.all_to_allv(in.data(), l.counts[size_t(r)], l.send_displs(r, n), out.data(), rc, l.recv_displs(r, n),
                     dtype_of<T>, Device::cpu())
        ->wait();
    return compare(out.data(), sh.expect_at<T>(r), int64_t(out.size()), "received (gaps included)");
  };
  return c;
}

template <typename Make>
std::vector<CaseDriver> for_dtypes_and_sizes(Make make) {
  std::vector<CaseDriver> out;
  uint64_t seed = 7;
  for (DType dt : data_dtypes())
    for (int64_t count : test_sizes()) {
      if (dtype_size(dt) == 1 && count > 37) continue;
      dispatch_dtype(dt, [&]<typename T>() { make.template operator()<T>(out, count, seed); });
      seed += 31;
    }
  return out;
}

TEST_P(ThreadData, AllGather) {
  run_cases(GetParam(),
            for_dtypes_and_sizes([]<typename T>(std::vector<CaseDriver>& out, int64_t count, uint64_t seed) {
              out.push_back(all_gather_case<T>(count, false, seed));
              out.push_back(all_gather_case<T>(count, true, seed + 1));
            }));
}

TEST_P(ThreadData, BroadcastFromEveryRoot) {
  run_cases(GetParam(),
            for_dtypes_and_sizes([]<typename T>(std::vector<CaseDriver>& out, int64_t count, uint64_t seed) {
              for (int root = 0; root < 4; ++root) out.push_back(broadcast_case<T>(count, root, seed + uint64_t(root)));
            }));
}

TEST_P(ThreadData, AllToAll) {
  run_cases(GetParam(),
            for_dtypes_and_sizes([]<typename T>(std::vector<CaseDriver>& out, int64_t count, uint64_t seed) {
              out.push_back(all_to_all_case<T>(count, false, seed));
              out.push_back(all_to_all_case<T>(count, true, seed + 1));
            }));
}

TEST_P(ThreadData, AllToAllVUnevenAndZeroCounts) {
  run_cases(GetParam(),
            for_dtypes_and_sizes([]<typename T>(std::vector<CaseDriver>& out, int64_t count, uint64_t seed) {
              out.push_back(all_to_allv_case<T>(count, seed));
            }));
}

TEST_P(ThreadData, TensorApi) {
  const int n = GetParam();
  run_threads(n, [&](CommunicatorPtr comm) {
    const int r = comm->rank();
    Tensor in = Tensor::full({2}, double(r), DType::bf16);
    Tensor out = Tensor::empty({2 * n}, DType::bf16);
    comm->all_gather(in, out)->wait();
    for (int j = 0; j < 2 * n; ++j) EXPECT_EQ(out.to_vector()[size_t(j)], double(j / 2));

    Tensor b = Tensor::full({3}, double(r + 10), DType::i32);
    comm->broadcast(b, n - 1)->wait();
    EXPECT_EQ(b.to_vector(), (std::vector<double>(3, double(n - 1 + 10))));

    Tensor a = Tensor::arange(n, DType::f64);  // element j goes to rank j
    Tensor a_out = Tensor::empty({n}, DType::f64);
    comm->all_to_all(a, a_out)->wait();
    EXPECT_EQ(a_out.to_vector(), (std::vector<double>(size_t(n), double(r))));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadData, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param); });

}  // namespace
}  // namespace dt::test
