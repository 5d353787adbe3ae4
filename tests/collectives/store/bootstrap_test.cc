// init_from_env with every launcher convention and the error cases; connect_store with rank 0 hosting in-process.
#include "collectives/bootstrap.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "collectives/store/tcp_store.h"
#include "core/error.h"
#include "store_test_util.h"

namespace dt {
namespace {
// connect_store returns the Store interface; these tests look at the TCP store's server and port.
std::shared_ptr<TcpStore> tcp(std::shared_ptr<Store> store) { return std::dynamic_pointer_cast<TcpStore>(store); }
}  // namespace
namespace {

using namespace std::chrono_literals;
using Env = std::map<std::string, std::string>;

BootstrapEnv parse(const Env& env) {
  return init_from_env([&](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

// The message of the InvalidArgument that parse(env) throws ("" when it does not throw).
std::string error_of(const Env& env) {
  try {
    parse(env);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(InitFromEnv, Dtrun) {
  auto e = parse({{"DT_RANK", "3"},
                  {"DT_WORLD_SIZE", "8"},
                  {"DT_LOCAL_RANK", "1"},
                  {"DT_LOCAL_WORLD_SIZE", "2"},
                  {"DT_MASTER_ADDR", "node0"},
                  {"DT_MASTER_PORT", "12345"},
                  {"DT_STORE_SECRET", "abc"},
                  {"DT_STORE_HOSTED", "1"}});
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 12345);
  EXPECT_EQ(e.secret, "abc");
  EXPECT_FALSE(e.insecure_secret);
  EXPECT_TRUE(e.store_hosted);
  EXPECT_EQ(e.bind_addr, "node0");
  EXPECT_EQ(e.launcher, "dtrun");
}

TEST(InitFromEnv, Torchrun) {
  auto e = parse({{"RANK", "1"},
                  {"WORLD_SIZE", "4"},
                  {"LOCAL_RANK", "1"},
                  {"LOCAL_WORLD_SIZE", "4"},
                  {"MASTER_ADDR", "10.0.0.1"},
                  {"MASTER_PORT", "29400"},
                  {"DT_MASTER_PORT", "29401"},  // overrides: torchrun's agent may own MASTER_PORT
                  {"DT_STORE_SECRET", "s"}});
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 29401);
  EXPECT_FALSE(e.store_hosted);
  EXPECT_EQ(e.launcher, "torchrun");
}

TEST(InitFromEnv, OpenMpi) {
  auto e = parse({{"OMPI_COMM_WORLD_RANK", "2"},
                  {"OMPI_COMM_WORLD_SIZE", "3"},
                  {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                  {"DT_STORE_SECRET", "s"}});
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.master_addr, "127.0.0.1");  // single node: loopback
  EXPECT_EQ(e.master_port, kDefaultMasterPort);
  EXPECT_EQ(e.launcher, "openmpi");
  // Several nodes (local size < world size) need the address of rank 0's node.
  std::string msg = error_of({{"OMPI_COMM_WORLD_RANK", "2"},
                              {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"DT_STORE_SECRET", "s"}});
  EXPECT_TRUE(contains(msg, "DT_MASTER_ADDR")) << msg;
}

TEST(InitFromEnv, Slurm) {
  auto e = parse({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "6"},
                  {"SLURM_LOCALID", "1"},
                  {"SLURM_NNODES", "3"},
                  {"MASTER_ADDR", "n0"},
                  {"DT_STORE_INSECURE", "1"}});
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 6);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, -1);  // unknown
  EXPECT_EQ(e.master_addr, "n0");
  EXPECT_EQ(e.secret, kInsecureDefaultSecret);
  EXPECT_TRUE(e.insecure_secret);
  EXPECT_EQ(e.launcher, "slurm");
  std::string msg =
      error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NNODES", "2"}, {"DT_STORE_SECRET", "s"}});
  EXPECT_TRUE(contains(msg, "DT_MASTER_ADDR")) << msg;
}

TEST(InitFromEnv, PrecedenceAcrossConventions) {
  // DT_ wins over OpenMPI and Slurm (they may legitimately differ, e.g. torchrun inside an allocation).
  auto e = parse({{"DT_RANK", "1"},
                  {"DT_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "1"},
                  {"SLURM_PROCID", "7"},
                  {"SLURM_NTASKS", "9"},
                  {"DT_STORE_SECRET", "s"}});
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.launcher, "dtrun");
  // torchrun's variables win over Slurm's.
  e = parse(
      {{"RANK", "4"}, {"WORLD_SIZE", "5"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"DT_STORE_SECRET", "s"}});
  EXPECT_EQ(e.rank, 4);
  EXPECT_EQ(e.world_size, 5);
  // DT_ and torchrun agreeing is fine; an empty value counts as unset.
  e = parse({{"DT_RANK", "1"}, {"RANK", "1"}, {"DT_WORLD_SIZE", ""}, {"WORLD_SIZE", "2"}, {"DT_STORE_SECRET", "s"}});
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
}

TEST(InitFromEnv, ErrorsNameTheVariable) {
  struct Case {
    Env env;
    std::vector<std::string> parts;  // every part must appear in the message
  };
  const std::vector<Case> cases = {
      {{{"DT_WORLD_SIZE", "2"}, {"DT_STORE_SECRET", "s"}}, {"DT_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}},
      {{{"DT_RANK", "0"}, {"DT_STORE_SECRET", "s"}}, {"DT_WORLD_SIZE"}},
      {{{"DT_RANK", "4"}, {"DT_WORLD_SIZE", "4"}, {"DT_STORE_SECRET", "s"}}, {"DT_RANK=4", "DT_WORLD_SIZE=4"}},
      {{{"RANK", "abc"}, {"WORLD_SIZE", "4"}, {"DT_STORE_SECRET", "s"}}, {"RANK", "abc", "not a decimal integer"}},
      {{{"DT_RANK", "-1"}, {"DT_WORLD_SIZE", "4"}, {"DT_STORE_SECRET", "s"}}, {"DT_RANK", ">= 0"}},
      {{{"DT_RANK", "1x"}, {"DT_WORLD_SIZE", "4"}, {"DT_STORE_SECRET", "s"}}, {"DT_RANK", "1x"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "0"}, {"DT_STORE_SECRET", "s"}}, {"DT_WORLD_SIZE", ">= 1"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "99999999999"}, {"DT_STORE_SECRET", "s"}}, {"DT_WORLD_SIZE"}},
      {{{"DT_RANK", "1"}, {"RANK", "2"}, {"DT_WORLD_SIZE", "4"}, {"DT_STORE_SECRET", "s"}},
       {"DT_RANK=1", "RANK=2", "disagree"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "4"}, {"WORLD_SIZE", "8"}, {"DT_STORE_SECRET", "s"}},
       {"DT_WORLD_SIZE=4", "WORLD_SIZE=8"}},
      {{{"DT_RANK", "0"},
        {"DT_WORLD_SIZE", "4"},
        {"DT_LOCAL_RANK", "2"},
        {"DT_LOCAL_WORLD_SIZE", "2"},
        {"DT_STORE_SECRET", "s"}},
       {"DT_LOCAL_RANK=2", "DT_LOCAL_WORLD_SIZE=2"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_LOCAL_WORLD_SIZE", "3"}, {"DT_STORE_SECRET", "s"}},
       {"DT_LOCAL_WORLD_SIZE=3", "DT_WORLD_SIZE=2"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_MASTER_PORT", "70000"}, {"DT_STORE_SECRET", "s"}},
       {"DT_MASTER_PORT", "1..65535"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}, {"DT_STORE_SECRET", "s"}}, {"MASTER_PORT"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}}, {"DT_STORE_SECRET", "DT_STORE_INSECURE"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_STORE_SECRET", ""}}, {"DT_STORE_SECRET", "empty"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_STORE_INSECURE", "maybe"}}, {"DT_STORE_INSECURE", "maybe"}},
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_STORE_HOSTED", "2"}, {"DT_STORE_SECRET", "s"}},
       {"DT_STORE_HOSTED"}},
      // A single-process job under a launcher that hosts the store still needs the launcher's secret.
      {{{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}, {"DT_STORE_HOSTED", "1"}}, {"DT_STORE_SECRET"}},
  };
  for (const auto& c : cases) {
    std::string msg = error_of(c.env);
    ASSERT_FALSE(msg.empty()) << "no error for case with " << c.parts[0];
    for (const auto& p : c.parts) EXPECT_TRUE(contains(msg, p)) << "'" << p << "' not in: " << msg;
  }
}

TEST(InitFromEnv, SecretRules) {
  auto e = parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}});
  EXPECT_EQ(e.secret.size(), 64u);  // a random one for a single-process job
  EXPECT_NE(parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}}).secret, e.secret);
  e = parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_STORE_INSECURE", "1"}});
  EXPECT_EQ(e.secret, kInsecureDefaultSecret);
  EXPECT_TRUE(e.insecure_secret);
  e = parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_STORE_INSECURE", "1"}, {"DT_STORE_SECRET", "mine"}});
  EXPECT_EQ(e.secret, "mine");  // an explicit secret wins
  EXPECT_FALSE(e.insecure_secret);
  e = parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "2"}, {"DT_STORE_SECRET", "s"}, {"DT_STORE_BIND_ADDR", "0.0.0.0"}});
  EXPECT_EQ(e.bind_addr, "0.0.0.0");
  EXPECT_EQ(e.master_addr, "127.0.0.1");
}

// The real process environment: every variable init_from_env reads is set or cleared for the test, then restored.
TEST(InitFromEnv, ReadsTheProcessEnvironment) {
  std::vector<std::unique_ptr<test::ScopedEnv>> guard;
  for (const char* v : {"DT_RANK",
                        "DT_WORLD_SIZE",
                        "DT_LOCAL_RANK",
                        "DT_LOCAL_WORLD_SIZE",
                        "DT_MASTER_ADDR",
                        "DT_MASTER_PORT",
                        "DT_STORE_SECRET",
                        "DT_STORE_HOSTED",
                        "DT_STORE_INSECURE",
                        "DT_STORE_BIND_ADDR",
                        "RANK",
                        "WORLD_SIZE",
                        "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE",
                        "MASTER_ADDR",
                        "MASTER_PORT",
                        "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "SLURM_PROCID",
                        "SLURM_NTASKS",
                        "SLURM_LOCALID",
                        "SLURM_NNODES"}) {
    guard.push_back(std::make_unique<test::ScopedEnv>(v, std::nullopt));
  }
  EXPECT_THROW(init_from_env(), InvalidArgument);
  test::ScopedEnv r("OMPI_COMM_WORLD_RANK", "1"), w("OMPI_COMM_WORLD_SIZE", "2"), s("DT_STORE_SECRET", "x"),
      p("DT_MASTER_PORT", "4321");
  auto e = init_from_env();
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
  EXPECT_EQ(e.master_port, 4321);
  EXPECT_EQ(e.launcher, "openmpi");
  {
    test::ScopedEnv bad("DT_RANK", "two");
    EXPECT_THROW(init_from_env(), InvalidArgument);
  }
}

BootstrapEnv rank_env(int rank, int world, int port, bool hosted = false) {
  Env env{{"DT_RANK", std::to_string(rank)},
          {"DT_WORLD_SIZE", std::to_string(world)},
          {"DT_MASTER_PORT", std::to_string(port)},
          {"DT_STORE_SECRET", "bootstrap-test-secret"}};
  if (hosted) env["DT_STORE_HOSTED"] = "1";
  return parse(env);
}

TEST(ConnectStore, RankZeroHostsAndOthersMayStartFirst) {
  constexpr int kWorld = 3;
  int port = test::free_port();
  std::vector<std::string> seen(kWorld);
  std::vector<std::thread> ranks;
  // Ranks 1 and 2 start first and retry until rank 0's server is up.
  for (int r = kWorld - 1; r >= 0; --r) {
    ranks.emplace_back([&, r] {
      if (r == 0) std::this_thread::sleep_for(200ms);
      auto store = tcp(connect_store(rank_env(r, kWorld, port), 10s));
      EXPECT_EQ(store->server() != nullptr, r == 0);
      store->set("addr/" + std::to_string(r), "rank" + std::to_string(r));
      for (int p = 0; p < kWorld; ++p) seen[r] += store->get("addr/" + std::to_string(p)) + ";";
      // Rank 0 owns the server: it leaves last.
      store->add("done", 1);
      if (r == 0) {
        while (store->get("done") != std::to_string(kWorld)) std::this_thread::sleep_for(5ms);
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(seen[r], "rank0;rank1;rank2;");
}

// Note [Generations]: the launcher's store outlives a generation; what a rank of generation g writes is invisible
// to generation g + 1 (a late write of a stopped rank of g lands under gen<g>/), and the restart count's two names
// must agree.
TEST(ConnectStore, GenerationsHaveTheirOwnKeys) {
  TcpStoreServerOptions so;
  so.secret = "bootstrap-test-secret";
  TcpStoreServer launcher(so);
  auto in_generation = [&](int rank, int g) {
    Env env{{"DT_RANK", std::to_string(rank)},
            {"DT_WORLD_SIZE", "2"},
            {"DT_MASTER_PORT", std::to_string(launcher.port())},
            {"DT_STORE_SECRET", "bootstrap-test-secret"},
            {"DT_STORE_HOSTED", "1"},
            {"DT_RESTART_COUNT", std::to_string(g)},
            {"TORCHELASTIC_RESTART_COUNT", std::to_string(g)}};
    return connect_store(parse(env), 2s);
  };
  auto old_rank = in_generation(1, 0);
  auto new_rank0 = in_generation(0, 1), new_rank1 = in_generation(1, 1);
  old_rank->set("addr/1", "endpoint of generation 0");
  EXPECT_FALSE(new_rank0->check({"addr/1"}));
  EXPECT_THROW(new_rank0->get("addr/1", 100ms), TimeoutError);
  new_rank1->set("addr/1", "endpoint of generation 1");
  old_rank->set("addr/1", "late write of generation 0");
  EXPECT_EQ(new_rank0->get("addr/1"), "endpoint of generation 1");
  EXPECT_EQ(parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}}).restart_count, -1);  // not elastic: no prefix
  EXPECT_TRUE(contains(
      error_of(
          {{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}, {"DT_RESTART_COUNT", "2"}, {"TORCHELASTIC_RESTART_COUNT", "1"}}),
      "DT_RESTART_COUNT=2 and TORCHELASTIC_RESTART_COUNT=1 disagree"));
  EXPECT_TRUE(
      contains(error_of({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}, {"DT_RESTART_COUNT", "-1"}}), "DT_RESTART_COUNT"));
}

TEST(ConnectStore, LauncherHostedStoreAndSingleProcess) {
  TcpStoreServerOptions so;
  so.secret = "bootstrap-test-secret";
  TcpStoreServer launcher(so);
  auto s0 = tcp(connect_store(rank_env(0, 2, launcher.port(), /*hosted=*/true), 5s));
  auto s1 = tcp(connect_store(rank_env(1, 2, launcher.port(), /*hosted=*/true), 5s));
  EXPECT_EQ(s0->server(), nullptr);  // the launcher hosts it
  s0->set("k", "v");
  EXPECT_EQ(s1->get("k"), "v");

  // A single process with nothing set but rank and size: hosts on a free port with a random secret.
  auto solo = tcp(connect_store(parse({{"DT_RANK", "0"}, {"DT_WORLD_SIZE", "1"}}), 5s));
  ASSERT_NE(solo->server(), nullptr);
  EXPECT_NE(solo->port(), kDefaultMasterPort);
  EXPECT_EQ(solo->add("n", 2), 2);
}

TEST(ConnectStore, WrongSecretFailsClearly) {
  TcpStoreServerOptions so;
  so.secret = "the-real-one";
  TcpStoreServer launcher(so);
  EXPECT_THROW(connect_store(rank_env(1, 2, launcher.port(), true), 5s), RemoteError);
}

}  // namespace
}  // namespace dt
