// What every collective benchmark of bench/ shares with the OpenMPI reference (bench/mpi_collectives.cc), so that
// their rows join on (op, ranks, bytes) and mean the same thing. Header-only and free of dtensor, so that the
// reference links nothing of ours.
//
// Size convention: S = per-rank INPUT bytes for every op (float32 elements).
//   all_gather(_inplace)  send S,  recv n*S   algbw = n*S/t   busbw = algbw*(n-1)/n
//   reduce_scatter        send S,  recv S/n   algbw = S/t     busbw = algbw*(n-1)/n   (sum)
//   all_reduce            send S,  recv S     algbw = S/t     busbw = algbw*2(n-1)/n  (sum)
//   all_to_all            send S,  recv S     algbw = S/t     busbw = algbw*(n-1)/n
//   broadcast             buf S               algbw = S/t     busbw = algbw           (root 0)
// (nccl-tests' formulas). A sample = barrier; inner_reps(S) back-to-back ops; time = max over ranks / inner; the
// median of the samples after the warm-up ops. Rank r's input element i is fill_value(r, i); results are checked
// once after the warm-up against expected_value.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace dt::bench {

inline const std::vector<size_t> kCollectiveSizes = {size_t(4) << 10, size_t(64) << 10, size_t(1) << 20,
                                                     size_t(16) << 20, size_t(64) << 20};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Back-to-back ops per sample: enough to make a sample about 4 MiB of input.
inline int inner_reps(size_t bytes) { return int(std::max<size_t>(1, (size_t(4) << 20) / bytes)); }

inline bool is_all_gather(const std::string& op) { return op == "all_gather" || op == "all_gather_inplace"; }

inline float fill_value(int rank, size_t i) { return float((rank + 1) + int(i % 7)); }

// Element i of `rank`'s output of `op` among n ranks, each with `cnt` input elements of fill_value (broadcast: from
// rank 0).
inline float expected_value(const std::string& op, int rank, int n, size_t cnt, size_t i) {
  if (is_all_gather(op)) return fill_value(int(i / cnt), i % cnt);
  if (op == "reduce_scatter") return float(n * (n + 1) / 2 + n * int((size_t(rank) * (cnt / size_t(n)) + i) % 7));
  if (op == "all_reduce") return float(n * (n + 1) / 2 + n * int(i % 7));
  if (op == "broadcast") return fill_value(0, i);
  const size_t blk = cnt / size_t(n);  // all_to_all: block i / blk comes from that rank, its slot for this rank
  return fill_value(int(i / blk), size_t(rank) * blk + i % blk);
}

// Output elements of `op` per rank.
inline size_t recv_count(const std::string& op, int n, size_t cnt) {
  return is_all_gather(op) ? cnt * size_t(n) : op == "reduce_scatter" ? cnt / size_t(n) : cnt;
}

// Whether every sampled output element (every 997th) holds its expected value.
inline bool check_output(const std::string& op, int rank, int n, size_t cnt, const float* out) {
  const size_t recv = recv_count(op, n, cnt);
  for (size_t i = 0; i < recv; i += 997)
    if (out[i] != expected_value(op, rank, n, cnt, i)) return false;
  return true;
}

// algbw in GB/s of one `op` among n ranks on `bytes` per rank that took `seconds`, and the factor to busbw.
inline double algbw_gbs(const std::string& op, int n, size_t bytes, double seconds) {
  return (is_all_gather(op) ? double(bytes) * n : double(bytes)) / seconds / 1e9;
}
inline double bus_factor(const std::string& op, int n) {
  return op == "all_reduce" ? 2.0 * (n - 1) / n : op == "broadcast" ? 1.0 : double(n - 1) / n;
}

// One JSON line on stdout: {"impl":..,"op":..,"ranks":n,"bytes":S,"time_us":..,"algbw_gbs":..,"busbw_gbs":..,"ok":..}
inline void print_row(const char* impl, const std::string& op, int n, size_t bytes, double seconds, bool ok) {
  const double alg = algbw_gbs(op, n, bytes, seconds);
  std::printf(
      "{\"impl\":\"%s\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"time_us\":%.2f,\"algbw_gbs\":%.3f,"
      "\"busbw_gbs\":%.3f,\"ok\":%s}\n",
      impl, op.c_str(), n, bytes, seconds * 1e6, alg, alg * bus_factor(op, n), ok ? "true" : "false");
  std::fflush(stdout);
}

}  // namespace dt::bench
