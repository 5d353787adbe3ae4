// The TCP store client: plain POSIX sockets in non-blocking mode, every read and write bounded by poll() with the
// call's deadline.
#include "collectives/store/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/logging.h"

namespace dt {

namespace sp = store_protocol;
using Clock = std::chrono::steady_clock;

namespace {

// A reply may hold a value of up to the request limit plus a few header bytes.
constexpr uint32_t kReplyOverhead = 1024;
// How much longer than the server-side wait the client waits for the server's own timeout reply.
constexpr StoreDuration kWaitSlack = std::chrono::seconds(5);

enum class Io { kOk, kTimeout, kClosed, kError };

int poll_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

Io wait_fd(int fd, short events, Clock::time_point deadline, int* err) {
  for (;;) {
    if (Clock::now() >= deadline) return Io::kTimeout;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, poll_ms(deadline));
    if (rc > 0) return Io::kOk;
    if (rc == 0) continue;  // re-checks the deadline
    if (errno == EINTR) continue;
    *err = errno;
    return Io::kError;
  }
}

Io write_all(int fd, const void* data, size_t n, Clock::time_point deadline, int* err) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Io r = wait_fd(fd, POLLOUT, deadline, err);
      if (r != Io::kOk) return r;
      continue;
    }
    *err = errno;
    return (errno == EPIPE || errno == ECONNRESET) ? Io::kClosed : Io::kError;
  }
  return Io::kOk;
}

Io read_exact(int fd, void* data, size_t n, Clock::time_point deadline, int* err) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return Io::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Io r = wait_fd(fd, POLLIN, deadline, err);
      if (r != Io::kOk) return r;
      continue;
    }
    *err = errno;
    return errno == ECONNRESET ? Io::kClosed : Io::kError;
  }
  return Io::kOk;
}

[[noreturn]] void throw_code(ErrorCode code, const std::string& msg) {
  // A code this build does not know (a newer server's) reads as a remote error.
  const bool known = code >= ErrorCode::kInvalidArgument && code <= ErrorCode::kInternal;
  std::rethrow_exception(make_error(known ? code : ErrorCode::kRemoteError, msg));
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

// Outcome of one connection attempt.
enum class Attempt { kConnected, kRetry };

}  // namespace

// Holds the connection for one call (see busy_).
class TcpStore::Turn {
 public:
  // Waits until `deadline` for the connection; returns false when it stays busy.
  Turn(TcpStore& s, Clock::time_point deadline) : s_(s) {
    std::unique_lock<std::mutex> lock(s_.mu_);
    held_ = s_.turn_cv_.wait_until(lock, deadline, [&] { return !s_.busy_; });
    if (held_) s_.busy_ = true;
  }
  ~Turn() {
    if (!held_) return;
    {
      std::lock_guard<std::mutex> lock(s_.mu_);
      s_.busy_ = false;
    }
    s_.turn_cv_.notify_one();
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  bool held() const { return held_; }

 private:
  TcpStore& s_;
  bool held_ = false;
};

TcpStore::TcpStore(TcpStoreOptions options, std::shared_ptr<TcpStoreServer> server)
    : Store(options.timeout), options_(std::move(options)), server_(std::move(server)) {
  DT_CHECK_ARG(!options_.host.empty(), "TcpStore: the host must be non-empty");
  DT_CHECK_ARG(options_.port >= 1 && options_.port <= 65535, "TcpStore: port must be in 1..65535, got ", options_.port);
  DT_CHECK_ARG(!options_.secret.empty(), "TcpStore: the secret must be non-empty (DT_STORE_SECRET)");
  DT_CHECK_ARG(!options_.connect_timeout || options_.connect_timeout->count() >= 0,
               "TcpStore: connect_timeout must be >= 0");
  DT_CHECK_ARG(options_.max_message_bytes >= 64, "TcpStore: max_message_bytes must be >= 64");
  options_.timeout = timeout();
  connect_locked(Clock::now() + options_.connect_timeout.value_or(timeout()));
}

TcpStore::~TcpStore() { close_locked(); }

std::unique_ptr<TcpStore> TcpStore::clone() const {
  TcpStoreOptions o = options_;
  o.timeout = timeout();
  return std::make_unique<TcpStore>(std::move(o), server_);
}

std::string TcpStore::address() const { return str_cat(options_.host, ":", options_.port); }

void TcpStore::close_locked() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TcpStore::connect_locked(Clock::time_point deadline) {
  const std::string where = address();
  const auto start = Clock::now();
  std::string last_error = "no attempt made";
  int backoff_ms = 20;
  const std::string port_str = std::to_string(options_.port);

  // One attempt over every resolved address. Throws for outcomes a retry cannot fix.
  auto attempt = [&]() -> Attempt {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(options_.host.c_str(), port_str.c_str(), &hints, &res);
    if (rc != 0) {
      last_error = str_cat("cannot resolve '", options_.host, "': ", ::gai_strerror(rc));
      return Attempt::kRetry;
    }
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      Fd s;
      s.fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (s.fd < 0) {
        last_error = str_cat("socket(): ", std::strerror(errno));
        continue;
      }
      int err = 0;
      if (::connect(s.fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
          last_error = std::strerror(errno);
          continue;
        }
        Io r = wait_fd(s.fd, POLLOUT, deadline, &err);
        if (r != Io::kOk) {
          last_error = r == Io::kTimeout ? std::string("connect timed out") : std::string(std::strerror(err));
          continue;
        }
        socklen_t len = sizeof(err);
        ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_error = std::strerror(err);
          continue;
        }
      }
      int one = 1;
      ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

      // Handshake: Note [store authentication].
      uint8_t hello[sp::kServerHelloBytes];
      Io r = read_exact(s.fd, hello, sizeof(hello), deadline, &err);
      if (r == Io::kTimeout) {
        last_error = "connected, but no store greeting arrived (is another service listening on that port?)";
        continue;
      }
      if (r != Io::kOk) {
        last_error = "the server closed the connection before its greeting";
        continue;  // a server that is starting, stopping or busy: retry
      }
      if (!std::equal(sp::kServerHelloMagic.begin(), sp::kServerHelloMagic.end(), hello)) {
        DT_THROW(RemoteError, "the service at ", where,
                 " is not a dtensor store (unexpected greeting); check DT_MASTER_ADDR/DT_MASTER_PORT");
      }
      sp::Nonce server_nonce, client_nonce;
      std::copy(hello + 4, hello + 4 + sp::kNonceBytes, server_nonce.begin());
      sp::random_bytes(client_nonce.data(), client_nonce.size());
      sp::Mac mac = sp::client_mac(options_.secret, server_nonce, client_nonce);
      uint8_t auth[sp::kClientAuthBytes];
      std::copy(sp::kClientAuthMagic.begin(), sp::kClientAuthMagic.end(), auth);
      std::copy(client_nonce.begin(), client_nonce.end(), auth + 4);
      std::copy(mac.begin(), mac.end(), auth + 4 + sp::kNonceBytes);
      r = write_all(s.fd, auth, sizeof(auth), deadline, &err);
      uint8_t accept[sp::kServerAcceptBytes];
      if (r == Io::kOk) r = read_exact(s.fd, accept, sizeof(accept), deadline, &err);
      if (r == Io::kTimeout) {
        last_error = "the server did not answer the authentication";
        continue;
      }
      if (r != Io::kOk) {
        DT_THROW(RemoteError, "the store at ", where,
                 " rejected authentication: is DT_STORE_SECRET the same on every rank as on the server?");
      }
      sp::Mac proof = sp::server_mac(options_.secret, server_nonce, client_nonce);
      if (!std::equal(sp::kServerAcceptMagic.begin(), sp::kServerAcceptMagic.end(), accept) ||
          !sp::mac_equal(proof.data(), accept + 4)) {
        DT_THROW(RemoteError, "the store at ", where, " failed to prove that it knows DT_STORE_SECRET");
      }
      fd_ = s.release();
      return Attempt::kConnected;
    }
    return Attempt::kRetry;
  };

  for (;;) {
    if (attempt() == Attempt::kConnected) {
      DT_LOG_DEBUG("connected to the store at ", where);
      return;
    }
    auto now = Clock::now();
    if (now >= deadline) {
      auto waited = std::chrono::duration_cast<StoreDuration>(now - start);
      DT_THROW(TimeoutError, "could not connect to the store at ", where, " within ", format_duration(waited), " (",
               last_error, "); is rank 0 (or dtrun) running, and are DT_MASTER_ADDR/DT_MASTER_PORT right?");
    }
    auto pause = std::min<int64_t>(backoff_ms, poll_ms(deadline));
    std::this_thread::sleep_for(std::chrono::milliseconds(pause));
    backoff_ms = std::min(backoff_ms * 2, 1000);
  }
}

TcpStore::Reply TcpStore::call(const sp::Writer& request, const std::string& what, StoreDuration timeout,
                               StoreDuration server_wait) {
  const std::string where = address();
  DT_CHECK_ARG(request.body_size() <= options_.max_message_bytes, "store ", what, " on ", where, ": the request is ",
               request.body_size(), " bytes, over the store's message limit of ", options_.max_message_bytes, " bytes");
  const auto start = Clock::now();
  const auto deadline = start + timeout + (server_wait.count() > 0 ? kWaitSlack : StoreDuration(0));
  Turn turn(*this, deadline);
  if (!turn.held()) {
    DT_THROW(TimeoutError, "store ", what, " on ", where, " timed out after ", format_duration(timeout),
             " waiting for another thread's call on the same TcpStore; use clone() for concurrent blocking calls");
  }
  if (fd_ < 0) {
    connect_locked(std::min(deadline, Clock::now() + options_.connect_timeout.value_or(this->timeout())));
  }
  std::string frame = request.frame();
  int err = 0;
  auto fail = [&](Io r, const char* stage) {
    close_locked();
    if (r == Io::kTimeout) {
      DT_THROW(TimeoutError, "store ", what, " on ", where, ": no reply within ",
               format_duration(std::chrono::duration_cast<StoreDuration>(Clock::now() - start)),
               " (is the server, in rank 0 or dtrun, stuck?)");
    }
    DT_THROW(RemoteError, "store ", what, ": lost the connection to the store at ", where, " while ", stage,
             err ? str_cat(" (", std::strerror(err), ")") : std::string(), "; did the server (rank 0 or dtrun) exit?");
  };
  Io r = write_all(fd_, frame.data(), frame.size(), deadline, &err);
  if (r != Io::kOk) fail(r, "sending the request");
  uint8_t header[4];
  r = read_exact(fd_, header, 4, deadline, &err);
  if (r != Io::kOk) fail(r, "reading the reply");
  uint32_t len = sp::load_u32(header);
  if (len == 0 || len > options_.max_message_bytes + kReplyOverhead) {
    close_locked();
    DT_THROW(RemoteError, "store ", what, ": the store at ", where, " sent a malformed reply (", len, " bytes)");
  }
  std::string body(len, '\0');
  r = read_exact(fd_, body.data(), len, deadline, &err);
  if (r != Io::kOk) fail(r, "reading the reply");
  Reply reply{static_cast<sp::Status>(static_cast<uint8_t>(body[0])), body.substr(1)};
  if (reply.status == sp::Status::kError) {
    sp::Reader rd(reinterpret_cast<const uint8_t*>(reply.body.data()), reply.body.size());
    uint8_t code = 0;
    std::string msg;
    if (!rd.u8(&code) || !rd.str(&msg)) msg = "(malformed error reply)";
    throw_code(static_cast<ErrorCode>(code), msg);
  }
  if (reply.status != sp::Status::kOk && reply.status != sp::Status::kTimeout) {
    close_locked();
    DT_THROW(RemoteError, "store ", what, ": the store at ", where, " sent an unknown reply status ",
             static_cast<int>(reply.status));
  }
  return reply;
}

namespace {

sp::Reader reader_of(const std::string& body) {
  return sp::Reader(reinterpret_cast<const uint8_t*>(body.data()), body.size());
}

[[noreturn]] void malformed(const std::string& what, const std::string& where) {
  DT_THROW(RemoteError, "store ", what, ": the store at ", where, " sent a malformed reply");
}

std::string quoted(const char* op, const std::string& key) { return str_cat(op, "('", key, "')"); }

}  // namespace

void TcpStore::do_set(const std::string& key, std::string_view value, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kSet)).str(key).str(value);
  Reply r = call(w, quoted("set", key), timeout, StoreDuration(0));
  if (r.status != sp::Status::kOk) malformed(quoted("set", key), address());
}

std::string TcpStore::do_get(const std::string& key, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kGet)).str(key).u64(static_cast<uint64_t>(timeout.count()));
  Reply r = call(w, quoted("get", key), timeout, timeout);
  if (r.status == sp::Status::kTimeout) {
    DT_THROW(TimeoutError, store_detail::wait_timeout_message(address(), {key}, {key}, timeout));
  }
  std::string value;
  auto rd = reader_of(r.body);
  if (!rd.str(&value)) malformed(quoted("get", key), address());
  return value;
}

int64_t TcpStore::do_add(const std::string& key, int64_t delta, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kAdd)).str(key).i64(delta);
  Reply r = call(w, quoted("add", key), timeout, StoreDuration(0));
  int64_t v = 0;
  auto rd = reader_of(r.body);
  if (r.status != sp::Status::kOk || !rd.i64(&v)) malformed(quoted("add", key), address());
  return v;
}

CompareSetResult TcpStore::do_compare_set(const std::string& key, std::optional<std::string_view> expected,
                                          std::string_view desired, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kCompareSet)).str(key).u8(expected ? 1 : 0).str(expected.value_or("")).str(desired);
  Reply r = call(w, quoted("compare_set", key), timeout, StoreDuration(0));
  uint8_t swapped = 0, has_value = 0;
  std::string value;
  auto rd = reader_of(r.body);
  if (r.status != sp::Status::kOk || !rd.u8(&swapped) || !rd.u8(&has_value) || !rd.str(&value)) {
    malformed(quoted("compare_set", key), address());
  }
  CompareSetResult out;
  out.swapped = swapped != 0;
  if (has_value) out.value = std::move(value);
  return out;
}

void TcpStore::do_wait(const std::vector<std::string>& keys, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kWait)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.u64(static_cast<uint64_t>(timeout.count()));
  std::string what = str_cat("wait(", store_detail::key_list(keys), ")");
  Reply r = call(w, what, timeout, timeout);
  if (r.status == sp::Status::kOk) return;
  auto rd = reader_of(r.body);
  uint32_t n = 0;
  std::vector<std::string> missing;
  if (!rd.u32(&n)) malformed(what, address());
  for (uint32_t i = 0; i < n; ++i) {
    std::string k;
    if (!rd.str(&k)) malformed(what, address());
    missing.push_back(std::move(k));
  }
  DT_THROW(TimeoutError, store_detail::wait_timeout_message(address(), keys, missing, timeout));
}

bool TcpStore::do_delete_key(const std::string& key, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kDelete)).str(key);
  Reply r = call(w, quoted("delete_key", key), timeout, StoreDuration(0));
  uint8_t v = 0;
  auto rd = reader_of(r.body);
  if (r.status != sp::Status::kOk || !rd.u8(&v)) malformed(quoted("delete_key", key), address());
  return v != 0;
}

bool TcpStore::do_check(const std::vector<std::string>& keys, StoreDuration timeout) {
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Op::kCheck)).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  std::string what = str_cat("check(", store_detail::key_list(keys), ")");
  Reply r = call(w, what, timeout, StoreDuration(0));
  uint8_t v = 0;
  auto rd = reader_of(r.body);
  if (r.status != sp::Status::kOk || !rd.u8(&v)) malformed(what, address());
  return v != 0;
}

}  // namespace dt
