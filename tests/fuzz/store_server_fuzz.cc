// libFuzzer target: the server side of the store protocol, over real sockets. One TcpStoreServer on 127.0.0.1 with a
// known secret serves the whole run; per input a fresh connection either
//   (a) first byte even: writes the bytes raw, without authenticating (bit 1 chooses whether it reads the server's
//       hello first), or
//   (b) first byte odd: authenticates correctly (with the protocol's own client_mac / server_mac) and then
//       writes the bytes as frames (the fuzzer supplies the length prefixes, so huge, zero and short lengths are
//       reached too),
// half-closes, and reads whatever the server answers until it closes (or a short deadline: a request may park in
// get()/wait()). After every input a well-behaved client must still get a set/get round trip through, and the
// process must not be accumulating sockets: a server that died, wedged or leaks connections is a finding.
#include <dirent.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "collectives/store/tcp_store.h"
#include "core/error.h"
#include "tests/collectives/store/store_test_util.h"

namespace {

using namespace std::chrono_literals;
namespace sp = dt::store_protocol;

constexpr const char* kSecret = "store-fuzz-secret";
// How long an input's connection waits for the server to finish with it: enough for a few frames on a busy machine.
constexpr int kDrainMs = 30;
// Open file descriptors the process may hold: the server, the checking client and a few connections still closing.
constexpr int kMaxOpenFds = 256;

int open_fds();

[[noreturn]] void fail(const char* what);

struct Fixture {
  Fixture() {
    dt::TcpStoreServerOptions so;
    so.secret = kSecret;
    so.auth_timeout = 2s;
    so.max_message_bytes = 1u << 20;  // the limit logic is the same at 64 MiB; 1 MiB keeps a huge frame cheap
    server = std::make_unique<dt::TcpStoreServer>(so);
    dt::TcpStoreOptions co;
    co.port = server->port();
    co.secret = kSecret;
    co.timeout = 10s;
    checker = std::make_unique<dt::TcpStore>(co);
  }
  std::unique_ptr<dt::TcpStoreServer> server;
  std::unique_ptr<dt::TcpStore> checker;  // the well-behaved client, one connection for the whole run
  uint64_t inputs = 0;
};

Fixture& fixture() {
  static Fixture* f = new Fixture();  // never destroyed: libFuzzer exits without unwinding
  return *f;
}

void fail(const char* what) {
  const dt::TcpStoreServer::Stats st = fixture().server->stats();
  std::fprintf(stderr,
               "store_server fuzz: %s (after %llu inputs; server: %lld accepted, %lld authenticated, %lld rejected; %d "
               "open fds)\n",
               what, static_cast<unsigned long long>(fixture().inputs), static_cast<long long>(st.accepted),
               static_cast<long long>(st.authenticated), static_cast<long long>(st.rejected), open_fds());
  std::abort();
}

int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n - 2;  // "." and ".."
}

void check_still_serving(Fixture& f) {
  const std::string key = "fuzz-check/" + std::to_string(f.inputs % 64);
  const std::string value = std::to_string(f.inputs);
  try {
    f.checker->set(key, value);
    if (f.checker->get(key) != value) fail("the checking client read back a different value");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("the server no longer serves a well-behaved client");
  }
}

// The client half of the handshake (Note [store authentication]) with the protocol's own MAC functions; a failure
// says at which step, after how long, and whether the server counted a rejection meanwhile.
void handshake(dt::test::RawConn& c) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t rejected = fixture().server->stats().rejected;
  auto failed = [&](const char* step) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "handshake: %s after %lld ms (errno %d; %lld rejections meanwhile)\n", step,
                 static_cast<long long>(ms), errno,
                 static_cast<long long>(fixture().server->stats().rejected - rejected));
    fail("the correct handshake was not accepted");
  };
  uint8_t hello[sp::kServerHelloBytes];
  if (!c.recv_exact(hello, sizeof(hello))) failed("no hello");
  sp::Nonce sn, cn;
  std::copy(hello + 4, hello + 4 + sp::kNonceBytes, sn.begin());
  sp::random_bytes(cn.data(), cn.size());
  const sp::Mac mac = sp::client_mac(kSecret, sn, cn);
  std::string auth(sp::kClientAuthMagic);
  auth.append(reinterpret_cast<const char*>(cn.data()), cn.size());
  auth.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  if (!c.send_all(auth)) failed("sending the answer failed");
  uint8_t ok[sp::kServerAcceptBytes];
  if (!c.recv_exact(ok, sizeof(ok))) failed("no DTOK");
  const sp::Mac proof = sp::server_mac(kSecret, sn, cn);
  if (!sp::mac_equal(proof.data(), ok + 4)) failed("a wrong server proof");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Fixture& f = fixture();
  ++f.inputs;
  {
    // From a different loopback address each time: at over 1,000 connections a second from one address the
    // ephemeral ports wrap within half a minute, into 4-tuples still in TIME_WAIT.
    dt::test::RawConn c(f.server->port(), 0x7f000002u + static_cast<uint32_t>(f.inputs % 0xfffff0u));
    if (data[0] & 1) {
      handshake(c);
    } else if (data[0] & 2) {
      uint8_t hello[sp::kServerHelloBytes];
      if (!c.recv_exact(hello, sizeof(hello))) fail("no hello from the server");
    }
    c.send_all(data + 1, size - 1);  // the server may close early: a failed send is fine
    ::shutdown(c.fd(), SHUT_WR);
    c.closed_by_peer(kDrainMs);
  }
  check_still_serving(f);
  if (f.inputs % 64 == 0 && open_fds() > kMaxOpenFds) fail("file descriptors are accumulating (leaked sessions)");
  return 0;
}
