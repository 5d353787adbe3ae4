// Store semantics, the same on MemoryStore, TcpStore and PrefixStore over either, with several client threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "collectives/store/memory_store.h"
#include "collectives/store/prefix_store.h"
#include "collectives/store/tcp_store.h"
#include "core/error.h"
#include "store_test_util.h"

namespace dt {
namespace {

using namespace std::chrono_literals;

// Makes clients of one store: every call returns a handle on the same key space (a new connection for TCP, so that
// threads can block independently).
struct Backend {
  std::string name;
  std::function<std::shared_ptr<Store>()> client;
  std::shared_ptr<TcpStoreServer> server;  // TCP only
};

constexpr const char* kSecret = "test-secret-0123456789";

Backend make_backend(const std::string& kind) {
  Backend b;
  b.name = kind;
  bool prefix = kind.rfind("prefix_", 0) == 0;
  std::string base = prefix ? kind.substr(7) : kind;
  std::function<std::shared_ptr<Store>()> raw;
  if (base == "memory") {
    auto mem = std::make_shared<MemoryStore>(10s);
    raw = [mem] { return std::shared_ptr<Store>(mem); };
  } else {
    TcpStoreServerOptions so;
    so.secret = kSecret;
    b.server = std::make_shared<TcpStoreServer>(so);
    int port = b.server->port();
    raw = [port] {
      TcpStoreOptions o;
      o.port = port;
      o.secret = kSecret;
      o.timeout = 10s;
      return std::shared_ptr<Store>(std::make_shared<TcpStore>(o));
    };
  }
  if (!prefix) {
    b.client = raw;
  } else {
    // Two levels of prefix, over a base that also holds unrelated keys with the same short names.
    b.client = [raw] {
      return std::shared_ptr<Store>(std::make_shared<PrefixStore>(std::make_shared<PrefixStore>(raw(), "outer"), "g1"));
    };
  }
  return b;
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_backend(GetParam());
    store_ = backend_.client();
  }
  Backend backend_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetGetOverwriteAndBinaryValues) {
  store_->set("a", "1");
  EXPECT_EQ(store_->get("a"), "1");
  store_->set("a", "22");
  EXPECT_EQ(store_->get("a"), "22");
  store_->set("empty", "");
  EXPECT_EQ(store_->get("empty"), "");
  EXPECT_TRUE(store_->check({"empty"}));

  std::mt19937 rng(42);
  for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(1000), size_t(1) << 20}) {
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(rng());
    std::string key = "bin" + std::to_string(n);
    store_->set_bytes(key, v);
    EXPECT_EQ(store_->get_bytes(key), v) << n;
  }
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes.push_back(static_cast<char>(i));
  store_->set("nul\x01key", all_bytes);
  EXPECT_EQ(store_->get("nul\x01key"), all_bytes);
}

TEST_P(StoreTest, AddIsAnIntegerCounter) {
  EXPECT_EQ(store_->add("c", 5), 5);
  EXPECT_EQ(store_->add("c", -7), -2);
  EXPECT_EQ(store_->get("c"), "-2");
  EXPECT_EQ(store_->add("zero", 0), 0);
  EXPECT_TRUE(store_->check({"zero"}));
  store_->set("n", "40");
  EXPECT_EQ(store_->add("n", 2), 42);
  store_->set("text", "abc");
  EXPECT_THROW(store_->add("text", 1), InvalidArgument);
  EXPECT_EQ(store_->get("text"), "abc");
  store_->set("big", std::to_string(INT64_MAX));
  EXPECT_THROW(store_->add("big", 1), InvalidArgument);
  EXPECT_EQ(store_->add("big", -1), INT64_MAX - 1);
  try {
    store_->add("text", 1);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("text"), std::string::npos) << e.what();
  }
}

TEST_P(StoreTest, CompareSet) {
  auto r = store_->compare_set("k", std::nullopt, "first");
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(r.value, "first");
  r = store_->compare_set("k", std::nullopt, "second");  // exists: create-if-absent fails
  EXPECT_FALSE(r.swapped);
  EXPECT_EQ(r.value, "first");
  r = store_->compare_set("k", "wrong", "second");
  EXPECT_FALSE(r.swapped);
  EXPECT_EQ(r.value, "first");
  r = store_->compare_set("k", "first", "second");
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(r.value, "second");
  EXPECT_EQ(store_->get("k"), "second");
  r = store_->compare_set("absent", "x", "y");
  EXPECT_FALSE(r.swapped);
  EXPECT_FALSE(r.value.has_value());
  EXPECT_FALSE(store_->check({"absent"}));
  store_->set("e", "");
  r = store_->compare_set("e", "", "filled");
  EXPECT_TRUE(r.swapped);
  EXPECT_EQ(store_->get("e"), "filled");
}

TEST_P(StoreTest, DeleteAndCheck) {
  EXPECT_TRUE(store_->check({}));
  EXPECT_FALSE(store_->check({"a"}));
  store_->set("a", "x");
  EXPECT_TRUE(store_->check({"a"}));
  EXPECT_FALSE(store_->check({"a", "b"}));
  store_->set("b", "y");
  EXPECT_TRUE(store_->check({"a", "b"}));
  EXPECT_TRUE(store_->delete_key("a"));
  EXPECT_FALSE(store_->delete_key("a"));
  EXPECT_FALSE(store_->check({"a", "b"}));
  EXPECT_TRUE(store_->check({"b"}));
}

TEST_P(StoreTest, InvalidArguments) {
  EXPECT_THROW(store_->set("", "v"), InvalidArgument);
  EXPECT_THROW(store_->get(""), InvalidArgument);
  EXPECT_THROW(store_->wait({"a", ""}), InvalidArgument);
  EXPECT_THROW(store_->wait({"a"}, StoreDuration(-1)), InvalidArgument);
  EXPECT_THROW(store_->set_timeout(StoreDuration(-5)), InvalidArgument);
  store_->wait({});  // nothing to wait for
}

TEST_P(StoreTest, WaitAndGetBlockUntilSet) {
  auto waiter_store = backend_.client();
  auto getter_store = backend_.client();
  std::atomic<bool> waited{false};
  std::string got;
  std::thread waiter([&] {
    waiter_store->wait({"k1", "k2"});
    waited = true;
  });
  std::thread getter([&] { got = getter_store->get("k2"); });
  store_->set("k1", "v1");
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(waited.load());  // k2 is still missing
  store_->set("k2", "v2");
  waiter.join();
  getter.join();
  EXPECT_TRUE(waited.load());
  EXPECT_EQ(got, "v2");
}

TEST_P(StoreTest, WaitSurvivesADeletedKey) {
  auto waiter_store = backend_.client();
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    waiter_store->wait({"a", "b"});
    waited = true;
  });
  store_->set("a", "1");
  store_->delete_key("a");
  store_->set("b", "2");  // "a" is gone again: the wait must go on
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(waited.load());
  store_->add("a", 1);
  waiter.join();
  EXPECT_TRUE(waited.load());
}

TEST_P(StoreTest, WaitTimeoutNamesKeysAndTimeout) {
  store_->set("present", "x");
  try {
    store_->wait({"present", "never"}, 200ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("never"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0.2 s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing: [" + std::string(GetParam().rfind("prefix_", 0) == 0 ? "outer/g1/" : "") + "never]"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(store_->get("never", 100ms), TimeoutError);
  // The connection is still usable after a timeout.
  EXPECT_EQ(store_->get("present"), "x");
  // The default deadline applies too.
  store_->set_timeout(150ms);
  EXPECT_THROW(store_->wait({"never"}), TimeoutError);
}

TEST_P(StoreTest, ConcurrentAddsAreAtomic) {
  constexpr int kThreads = 8, kIters = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto s = backend_.client();
      for (int i = 0; i < kIters; ++i) seen[t].push_back(s->add("counter", 1));
    });
  }
  for (auto& th : threads) th.join();
  std::vector<int64_t> all;
  for (auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * kIters);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<int64_t>(i) + 1;
  EXPECT_EQ(all, expected);  // every value handed out exactly once
  EXPECT_EQ(store_->get("counter"), std::to_string(kThreads * kIters));
}

TEST_P(StoreTest, RendezvousOfManyClients) {
  // Each "rank" publishes its value, joins a barrier, then reads every other rank's value.
  constexpr int kRanks = 12;
  std::vector<std::vector<std::string>> got(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto s = backend_.client();
      s->set("rank/" + std::to_string(r), "value-" + std::to_string(r * 7));
      if (s->add("arrived", 1) == kRanks) s->set("go", "1");
      s->wait({"go"});
      for (int p = 0; p < kRanks; ++p) got[r].push_back(s->get("rank/" + std::to_string(p)));
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(got[r].size(), size_t(kRanks));
    for (int p = 0; p < kRanks; ++p) EXPECT_EQ(got[r][p], "value-" + std::to_string(p * 7));
  }
}

TEST_P(StoreTest, ManyConcurrentWaiters) {
  constexpr int kWaiters = 32;
  std::atomic<int> released{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      auto s = backend_.client();
      s->add("registered", 1);
      EXPECT_EQ(s->get("release"), "now");
      ++released;
    });
  }
  // Once all have registered, they are (or are about to be) blocked on the same key.
  store_->wait({"registered"});
  while (std::stoll(store_->get("registered")) < kWaiters) std::this_thread::sleep_for(5ms);
  store_->set("release", "now");
  for (auto& th : threads) th.join();
  EXPECT_EQ(released.load(), kWaiters);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("memory", "tcp", "prefix_memory", "prefix_tcp"),
                         [](const auto& info) { return info.param; });

// --- specific to one implementation ------------------------------------------------------------------------------

TEST(PrefixStore, KeySpacesAreSeparate) {
  auto base = std::make_shared<MemoryStore>(5s);
  PrefixStore g0(base, "g0"), g1(base, "g1");
  g0.set("k", "zero");
  EXPECT_FALSE(g1.check({"k"}));
  g1.set("k", "one");
  EXPECT_EQ(g0.get("k"), "zero");
  EXPECT_EQ(g1.get("k"), "one");
  EXPECT_EQ(base->get("g0/k"), "zero");
  EXPECT_EQ(base->get("g1/k"), "one");
  EXPECT_FALSE(base->check({"k"}));
  auto nested = std::make_shared<PrefixStore>(std::make_shared<PrefixStore>(base, "g0"), "sub");
  nested->set("k", "deep");
  EXPECT_EQ(base->get("g0/sub/k"), "deep");
  EXPECT_EQ(nested->timeout(), 5s);
  EXPECT_THROW(PrefixStore(base, ""), InvalidArgument);
  EXPECT_THROW(PrefixStore(base, "a/"), InvalidArgument);
  EXPECT_THROW(PrefixStore(nullptr, "a"), InvalidArgument);
}

TEST(StoreTimeout, DefaultComesFromEnvironment) {
  {
    test::ScopedEnv env("DT_TIMEOUT_S", std::nullopt);
    EXPECT_EQ(default_store_timeout(), std::chrono::seconds(300));
    EXPECT_EQ(MemoryStore().timeout(), std::chrono::seconds(300));
  }
  {
    test::ScopedEnv env("DT_TIMEOUT_S", "0.25");
    EXPECT_EQ(default_store_timeout(), 250ms);
    EXPECT_EQ(MemoryStore().timeout(), 250ms);
    EXPECT_EQ(MemoryStore(3s).timeout(), 3s);
  }
  for (const char* bad : {"abc", "-1", "0", "1e99", "5s"}) {
    test::ScopedEnv env("DT_TIMEOUT_S", bad);
    try {
      default_store_timeout();
      FAIL() << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("DT_TIMEOUT_S"), std::string::npos) << e.what();
    }
  }
}

TEST(TcpStore, CloneSharesTheKeySpaceAndOwnsTheServer) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  auto server = std::make_shared<TcpStoreServer>(so);
  TcpStoreOptions o;
  o.port = server->port();
  o.secret = kSecret;
  o.timeout = 5s;
  std::weak_ptr<TcpStoreServer> weak = server;
  auto a = std::make_unique<TcpStore>(o, std::move(server));
  auto b = a->clone();
  a->set("x", "1");
  EXPECT_EQ(b->get("x"), "1");
  EXPECT_EQ(b->timeout(), 5s);
  EXPECT_EQ(a->address(), "127.0.0.1:" + std::to_string(o.port));
  a.reset();
  EXPECT_FALSE(weak.expired());  // the clone keeps it
  EXPECT_EQ(b->add("x", 1), 2);
  b.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(TcpStore, OneClientSharedByThreadsSerializesCalls) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  TcpStoreServer server(so);
  TcpStoreOptions o;
  o.port = server.port();
  o.secret = kSecret;
  o.timeout = 10s;
  TcpStore shared(o);
  constexpr int kThreads = 4, kIters = 50;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        seen[t].push_back(shared.add("n", 1));
        shared.set("last/" + std::to_string(t), std::to_string(i));
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<int64_t> all;
  for (auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(i) + 1);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(shared.get("last/" + std::to_string(t)), std::to_string(kIters - 1));

  // A call stuck behind another thread's blocking wait fails at its own deadline and points at clone().
  shared.set_timeout(300ms);
  std::thread blocker([&] { EXPECT_THROW(shared.wait({"never"}, 1500ms), TimeoutError); });
  bool timed_out = false;
  for (auto end = std::chrono::steady_clock::now() + 1200ms; !timed_out && std::chrono::steady_clock::now() < end;) {
    try {
      shared.set("x", "1");  // the blocker may not have started yet
      std::this_thread::sleep_for(10ms);
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("clone()"), std::string::npos) << e.what();
      timed_out = true;
    }
  }
  EXPECT_TRUE(timed_out);
  blocker.join();
  shared.set("x", "2");  // free again
  EXPECT_EQ(shared.get("x"), "2");
}

TEST(TcpStore, MessageLimitIsCheckedBeforeSending) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  so.max_message_bytes = 1024;
  TcpStoreServer server(so);
  TcpStoreOptions o;
  o.port = server.port();
  o.secret = kSecret;
  o.timeout = 5s;
  o.max_message_bytes = 1024;
  TcpStore s(o);
  EXPECT_THROW(s.set("k", std::string(2000, 'x')), InvalidArgument);
  s.set("k", std::string(900, 'y'));
  EXPECT_EQ(s.get("k").size(), 900u);
}

TEST(TcpStore, ServerGoneIsAnErrorNamingTheAddress) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  auto server = std::make_unique<TcpStoreServer>(so);
  TcpStoreOptions o;
  o.port = server->port();
  o.secret = kSecret;
  o.timeout = 2s;
  o.connect_timeout = 300ms;
  TcpStore s(o);
  s.set("k", "v");
  server->stop();
  server.reset();
  try {
    s.get("k");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::kRemoteError || e.code() == ErrorCode::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(o.port)), std::string::npos) << e.what();
  }
}

TEST(TcpStore, OptionsAreValidated) {
  TcpStoreServerOptions so;
  EXPECT_THROW(TcpStoreServer{so}, InvalidArgument);  // no secret
  so.secret = "s";
  so.port = 70000;
  EXPECT_THROW(TcpStoreServer{so}, InvalidArgument);
  TcpStoreOptions o;
  o.secret = "s";
  o.port = 0;
  EXPECT_THROW(TcpStore{o}, InvalidArgument);
  o.port = 1234;
  o.secret = "";
  EXPECT_THROW(TcpStore{o}, InvalidArgument);
}

TEST(TcpStoreServer, PortInUseIsAClearError) {
  TcpStoreServerOptions so;
  so.secret = kSecret;
  TcpStoreServer first(so);
  so.port = first.port();
  try {
    TcpStoreServer second(so);
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(so.port)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dt
