// Helpers for the store tests: a free port, raw sockets for attacking the server, a scoped environment variable.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "collectives/store/store_protocol.h"
#include "core/config.h"

namespace dt::test {

// A port that was free a moment ago (bound to port 0, then closed).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) throw std::runtime_error("bind failed");
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A blocking loopback socket for speaking raw bytes to the server.
class RawConn {
 public:
  // `source`: the local IPv4 address to connect from (host order; any loopback address 127.x.y.z works), or
  // INADDR_ANY for the kernel's choice. Many connections a second from varied sources do not run the ephemeral ports
  // into 4-tuples still in TIME_WAIT. Every call retries on EINTR (the fuzz target runs under libFuzzer's SIGALRM).
  explicit RawConn(int port, uint32_t source = INADDR_ANY) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (source != INADDR_ANY) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      local.sin_addr.s_addr = htonl(source);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
        ::close(fd_);
        throw std::runtime_error("bind to the source address failed");
      }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    int rc = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    if (rc != 0 && errno == EINTR) {
      // Interrupted (libFuzzer's SIGALRM, say): the connection goes on; wait for its outcome.
      pollfd pf{fd_, POLLOUT, 0};
      while ((rc = ::poll(&pf, 1, 5000)) < 0 && errno == EINTR) {
      }
      int err = rc > 0 ? 0 : ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (rc > 0) ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc != 0) {
      const int err = errno;
      ::close(fd_);
      throw std::runtime_error(std::string("connect failed: ") + std::strerror(err));
    }
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool send_all(const void* data, size_t n) {
    auto* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  bool send_all(const std::string& s) { return send_all(s.data(), s.size()); }

  // Reads exactly n bytes within timeout_ms; false on EOF, error or timeout.
  bool recv_exact(void* data, size_t n, int timeout_ms = 5000) {
    auto* p = static_cast<char*>(data);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (n > 0) {
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd pf{fd_, POLLIN, 0};
      const int ready = ::poll(&pf, 1, left);
      if (ready < 0 && errno == EINTR) continue;  // a signal (libFuzzer's SIGALRM) is not a failure
      if (ready <= 0) return false;
      ssize_t k = ::recv(fd_, p, n, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return false;
      p += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }

  // Whether the server closes the connection within timeout_ms (reads and discards anything it sends first).
  bool closed_by_peer(int timeout_ms = 5000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    char buf[4096];
    for (;;) {
      int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (left <= 0) return false;
      pollfd pf{fd_, POLLIN, 0};
      const int ready = ::poll(&pf, 1, left);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return false;
      ssize_t k = ::recv(fd_, buf, sizeof(buf), 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return true;
    }
  }

  // The client half of the handshake (Note [store authentication]); returns whether the server accepted.
  // `auth_out`, when given, receives the 68 bytes sent (for a replay attempt).
  bool authenticate(const std::string& secret, std::string* auth_out = nullptr) {
    namespace sp = store_protocol;
    uint8_t hello[sp::kServerHelloBytes];
    if (!recv_exact(hello, sizeof(hello))) return false;
    sp::Nonce sn, cn;
    std::copy(hello + 4, hello + 4 + sp::kNonceBytes, sn.begin());
    sp::random_bytes(cn.data(), cn.size());
    sp::Mac mac = sp::client_mac(secret, sn, cn);
    std::string auth(sp::kClientAuthMagic);
    auth.append(reinterpret_cast<const char*>(cn.data()), cn.size());
    auth.append(reinterpret_cast<const char*>(mac.data()), mac.size());
    if (auth_out) *auth_out = auth;
    if (!send_all(auth)) return false;
    uint8_t ok[sp::kServerAcceptBytes];
    if (!recv_exact(ok, sizeof(ok))) return false;
    sp::Mac proof = sp::server_mac(secret, sn, cn);
    return std::string(reinterpret_cast<char*>(ok), 4) == sp::kServerAcceptMagic && sp::mac_equal(proof.data(), ok + 4);
  }

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

// Sets (or unsets, with nullopt) an environment variable for the scope, restoring the old value after; dtensor's
// configuration is parsed again at the next use on both ends of the scope.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
    config::reset_for_testing();
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
    config::reset_for_testing();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace dt::test
