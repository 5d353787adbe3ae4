// The transport-free index math of the collective algorithms (collectives/algorithms/) and the UCX selection table,
// checked by simulating every algorithm on sets ("which ranks' data does this buffer hold") for many group sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "collectives/algorithms/broadcast.h"
#include "collectives/algorithms/dissemination.h"
#include "collectives/algorithms/pairwise.h"
#include "collectives/algorithms/recursive_doubling.h"
#include "collectives/algorithms/ring.h"
#include "collectives/ucx/algorithm_table.h"
#include "core/error.h"

namespace dt::algorithms {
namespace {

using Set = std::set<int>;

Set all_ranks(int n) {
  Set s;
  for (int r = 0; r < n; ++r) s.insert(r);
  return s;
}

TEST(RingAlgorithm, AllGatherDeliversEveryBlockOnce) {
  for (int n = 1; n <= 9; ++n) {
    std::vector<Set> have(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) have[size_t(r)] = {r};
    for (int s = 0; s < ring::steps(n); ++s) {
      std::vector<Set> next = have;
      for (int r = 0; r < n; ++r) {
        const int b = ring::all_gather_send_block(r, n, s);
        ASSERT_TRUE(have[size_t(r)].count(b))
            << "n=" << n << " rank " << r << " sends block " << b << " it does not hold at step " << s;
        const int to = ring::right(r, n);
        EXPECT_EQ(ring::all_gather_recv_block(to, n, s), b) << "n=" << n << " step " << s;
        EXPECT_FALSE(have[size_t(to)].count(b)) << "block " << b << " delivered twice to rank " << to;
        next[size_t(to)].insert(b);
      }
      have = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(have[size_t(r)], all_ranks(n)) << "n=" << n << " rank " << r;
  }
}

TEST(RingAlgorithm, ReduceScatterCombinesEveryContributionOnce) {
  for (int n = 2; n <= 9; ++n) {
    // partial[r]: the contributors of what rank r sends at the current step (block send_block(r, s)).
    std::vector<Set> partial(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) partial[size_t(r)] = {r};
    std::vector<Set> final_block(static_cast<size_t>(n));
    for (int s = 0; s < ring::steps(n); ++s) {
      std::vector<Set> next(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        const int from = ring::left(r, n);
        const int b = ring::reduce_scatter_recv_block(r, n, s);
        EXPECT_EQ(ring::reduce_scatter_send_block(from, n, s), b) << "n=" << n << " step " << s;
        Set got = partial[size_t(from)];
        EXPECT_FALSE(got.count(r)) << "rank " << r << " would add its input to block " << b << " twice";
        got.insert(r);
        if (s + 1 < ring::steps(n)) {
          EXPECT_EQ(ring::reduce_scatter_send_block(r, n, s + 1), b) << "rank " << r << " forwards another block";
          next[size_t(r)] = got;
        } else {
          EXPECT_EQ(b, r) << "the last step must complete the rank's own block";
          final_block[size_t(r)] = got;
        }
      }
      partial = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(final_block[size_t(r)], all_ranks(n)) << "n=" << n << " rank " << r;
  }
}

TEST(RingAlgorithm, BlocksAndChunksCoverExactly) {
  for (int64_t count : {0, 1, 2, 7, 10, 37, 1000, 1001}) {
    for (int n = 1; n <= 9; ++n) {
      Blocks b(count, n);
      int64_t next = 0;
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(b.offset(i), next) << "count " << count << " n " << n;
        EXPECT_GE(b.size(i), 0);
        EXPECT_LE(b.size(i), b.block);
        next += b.size(i);
      }
      EXPECT_EQ(next, count);
    }
    for (int64_t chunks : {1, 2, 3, 8, 2000}) {
      Chunking c(count, chunks);
      int64_t next = 0;
      for (int64_t i = 0; i < c.chunks; ++i) {
        EXPECT_EQ(c.offset(i), next);
        next += c.size(i);
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_EQ(Chunking::chunks_for(1000, 4, 1024), 4);  // 256 elements per chunk
  EXPECT_EQ(Chunking::chunks_for(0, 4, 1024), 1);
  EXPECT_EQ(Chunking::chunks_for(1000, 4, 0), 1);
}

TEST(RecursiveDoubling, EveryRankEndsWithEveryContribution) {
  for (int n = 1; n <= 33; ++n) {
    std::vector<Set> val(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) val[size_t(r)] = {r};
    std::vector<RecursiveDoubling> rd;
    for (int r = 0; r < n; ++r) rd.emplace_back(r, n);
    // Fold: each extra rank hands its data to its partner.
    for (int r = 0; r < n; ++r)
      if (rd[size_t(r)].is_extra()) {
        const int p = rd[size_t(r)].fold_partner();
        EXPECT_EQ(rd[size_t(p)].fold_partner(), r);
        EXPECT_FALSE(rd[size_t(p)].is_extra());
        val[size_t(p)].insert(r);
      }
    int participants = 0;
    for (int r = 0; r < n; ++r) participants += rd[size_t(r)].vrank() >= 0;
    EXPECT_EQ(participants, rd[0].pof2);
    for (int k = 0; k < rd[0].rounds(); ++k) {
      std::vector<Set> next = val;
      for (int r = 0; r < n; ++r) {
        if (rd[size_t(r)].is_extra()) continue;
        const int p = rd[size_t(r)].partner(k);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, n);
        EXPECT_EQ(rd[size_t(p)].partner(k), r) << "n=" << n << " round " << k << ": partners disagree";
        EXPECT_NE(rd[size_t(p)].lower_in(k), rd[size_t(r)].lower_in(k)) << "both sides think they are lower";
        for (int x : val[size_t(p)]) next[size_t(r)].insert(x);
      }
      val = next;
    }
    for (int r = 0; r < n; ++r)
      if (rd[size_t(r)].is_extra()) val[size_t(r)] = val[size_t(rd[size_t(r)].fold_partner())];
    for (int r = 0; r < n; ++r) EXPECT_EQ(val[size_t(r)], all_ranks(n)) << "n=" << n << " rank " << r;
  }
}

TEST(Broadcast, BinomialTreeReachesEveryRankOnceFromAnyRoot) {
  for (int n = 1; n <= 33; ++n)
    for (int root : {0, n / 2, n - 1}) {
      std::vector<int> received(static_cast<size_t>(n), 0);
      std::vector<int> frontier = {0};  // virtual ranks that hold the data
      received[0] = 1;
      size_t head = 0;
      while (head < frontier.size()) {
        const int v = frontier[head++];
        for (int c : binomial::children(v, n)) {
          EXPECT_EQ(binomial::parent(c), v) << "n=" << n;
          EXPECT_GT(c, v);
          ++received[size_t(c)];
          frontier.push_back(c);
        }
      }
      for (int v = 0; v < n; ++v) EXPECT_EQ(received[size_t(v)], 1) << "n=" << n << " vrank " << v;
      for (int r = 0; r < n; ++r) EXPECT_EQ(absolute_rank(relative_rank(r, root, n), root, n), r);
      EXPECT_EQ(relative_rank(root, root, n), 0);
    }
}

TEST(Broadcast, ChainVisitsEveryRank) {
  for (int n = 1; n <= 9; ++n) {
    int v = 0, hops = 0;
    while (chain::next(v, n) >= 0) {
      EXPECT_EQ(chain::prev(chain::next(v, n)), v);
      v = chain::next(v, n);
      ++hops;
    }
    EXPECT_EQ(hops, n - 1);
  }
}

TEST(Pairwise, EveryStepIsAPermutationAndCoversEveryPair) {
  for (int n = 1; n <= 9; ++n) {
    std::set<std::pair<int, int>> pairs;
    for (int s = 1; s < pairwise::steps(n); ++s) {
      Set targets;
      for (int r = 0; r < n; ++r) {
        const int to = pairwise::send_peer(r, n, s);
        EXPECT_NE(to, r);
        EXPECT_EQ(pairwise::recv_peer(to, n, s), r);
        targets.insert(to);
        pairs.insert({r, to});
      }
      EXPECT_EQ(int(targets.size()), n) << "two senders target one rank at step " << s;
    }
    EXPECT_EQ(int(pairs.size()), n * (n - 1));
  }
}

TEST(Dissemination, EveryRankHearsFromEveryRank) {
  for (int n = 1; n <= 17; ++n) {
    std::vector<Set> know(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) know[size_t(r)] = {r};
    for (int k = 0; k < dissemination::rounds(n); ++k) {
      std::vector<Set> next = know;
      for (int r = 0; r < n; ++r) {
        const int from = dissemination::recv_peer(r, n, k);
        EXPECT_EQ(dissemination::send_peer(from, n, k), r);
        for (int x : know[size_t(from)]) next[size_t(r)].insert(x);
      }
      know = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(know[size_t(r)], all_ranks(n)) << "n=" << n;
  }
}

// The name of the algorithm the table chooses.
std::string chosen(CollectiveKind kind, int64_t bytes, int n, bool one_host, const ucx::UcxTuning& t,
                   bool views = false) {
  return ucx::select_algorithm(ucx::SelectionInput{kind, bytes, n, one_host, views}, t).algorithm->name;
}

TEST(UcxAlgorithmTable, ChoosesBySize) {
  ucx::UcxTuning t;
  t.allreduce_small_bytes = 1000;
  t.broadcast_small_bytes = 500;
  t.chunk_bytes = 4096;
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 1000, 4, false, t), "recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 1001, 4, false, t), "ring");
  EXPECT_EQ(ucx::select_algorithm(CollectiveKind::kAllReduce, 1001, 4, false, t).chunk_bytes, 4096);
  EXPECT_EQ(ucx::select_algorithm(CollectiveKind::kAllReduce, 1000, 4, false, t).chunk_bytes, 0);
  EXPECT_EQ(chosen(CollectiveKind::kBroadcast, 500, 4, false, t), "binomial");
  EXPECT_EQ(chosen(CollectiveKind::kBroadcast, 501, 4, false, t), "chain");
  EXPECT_EQ(chosen(CollectiveKind::kAllGather, 1 << 30, 2, false, t), "ring");
  EXPECT_EQ(chosen(CollectiveKind::kReduceScatter, 0, 3, false, t), "ring");
  EXPECT_EQ(chosen(CollectiveKind::kAllToAll, 10, 3, false, t), "pairwise");
  EXPECT_EQ(chosen(CollectiveKind::kAllToAllV, 10, 3, false, t), "pairwise");
  EXPECT_EQ(chosen(CollectiveKind::kBarrier, 0, 3, false, t), "dissemination");
  EXPECT_EQ(chosen(CollectiveKind::kSend, 10, 3, false, t), "point_to_point");
  EXPECT_EQ(chosen(CollectiveKind::kRecv, 10, 1, false, t), "point_to_point");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 10, 1, false, t), "local");
  EXPECT_EQ(chosen(CollectiveKind::kAllGather, 10, 1, false, t, /*views=*/true), "views");
  EXPECT_EQ(chosen(CollectiveKind::kAllToAllV, 10, 4, true, t, /*views=*/true), "views");
  // Members on one host: the direct all-reduce from its minimum size on (never when the minimum is negative).
  t.direct_allreduce_min_bytes = 5000;
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 4999, 4, true, t), "ring");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 5000, 4, true, t), "direct");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 5000, 4, false, t), "ring");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 10, 4, true, t), "recursive_doubling");
  t.direct_allreduce_min_bytes = -1;
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 1 << 30, 4, true, t), "ring");
}

// Every (kind, name) pair is unique, every kind has an algorithm that always applies, and find_algorithm finds each.
TEST(UcxAlgorithmTable, Descriptors) {
  for (size_t k = 0; k < ucx::kNumCollectiveKinds; ++k) {
    const auto kind = CollectiveKind(k);
    std::set<std::string> names;
    for (const ucx::AlgorithmDesc& d : ucx::algorithm_table()) {
      if (!d.serves(kind)) continue;
      EXPECT_TRUE(names.insert(d.name).second) << collective_kind_name(kind) << ": '" << d.name << "' twice";
      EXPECT_EQ(ucx::find_algorithm(kind, d.name), &d);
      EXPECT_NE(d.build, nullptr) << d.name;
      EXPECT_NE(d.admits, nullptr) << d.name;
      EXPECT_EQ(d.can_run == nullptr, d.needs == nullptr) << d.name << ": a requirement needs its description";
    }
    EXPECT_FALSE(names.empty()) << collective_kind_name(kind);
  }
  EXPECT_EQ(ucx::find_algorithm(CollectiveKind::kBroadcast, "direct"), nullptr);
}

TEST(UcxAlgorithmTable, Forced) {
  ucx::UcxTuning t;
  t.force_algorithms(" all_reduce:direct , all_gather:ring,broadcast:chain");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 8, 4, true, t), "direct");  // below every size rule
  EXPECT_EQ(chosen(CollectiveKind::kBroadcast, 8, 4, false, t), "chain");
  EXPECT_EQ(ucx::select_algorithm(CollectiveKind::kBroadcast, 8, 4, false, t).chunk_bytes, t.chunk_bytes);
  EXPECT_EQ(chosen(CollectiveKind::kReduceScatter, 8, 4, false, t), "ring");  // not forced: the rules
  // What the call dictates wins over forcing: a group of one, strided views.
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 8, 1, true, t), "local");
  EXPECT_EQ(chosen(CollectiveKind::kAllGather, 8, 4, true, t, /*views=*/true), "views");
  // Forced but unable to run: members on several hosts.
  try {
    ucx::select_algorithm(CollectiveKind::kAllReduce, 8, 4, false, t);
    ADD_FAILURE() << "expected dt::Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("'direct' forced for all_reduce"), std::string::npos) << e.what();
  }
  t.force_algorithms("");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, 8, 4, true, t), "recursive_doubling");
  t.force_algorithms("all_reduce:recursive_doubling");
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, int64_t(1) << 30, 4, true, t), "recursive_doubling");
  // Unknown names list the valid ones; a bad spec leaves the previous choices alone.
  auto error_of = [&](const char* spec) {
    try {
      t.force_algorithms(spec);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string bad_name = error_of("all_reduce:fast");
  EXPECT_NE(
      bad_name.find("no algorithm 'fast' for all_reduce; expected one of local, recursive_doubling, direct, ring"),
      std::string::npos)
      << bad_name;
  const std::string bad_kind = error_of("allreduce:ring");
  EXPECT_NE(bad_kind.find("no collective kind 'allreduce'; expected one of all_gather, reduce_scatter, all_reduce"),
            std::string::npos)
      << bad_kind;
  EXPECT_NE(error_of("all_reduce").find("expected kind:algorithm"), std::string::npos);
  EXPECT_NE(error_of("barrier:ring").find("expected one of local, dissemination"), std::string::npos);
  EXPECT_EQ(chosen(CollectiveKind::kAllReduce, int64_t(1) << 30, 4, true, t), "recursive_doubling");
}

}  // namespace
}  // namespace dt::algorithms
