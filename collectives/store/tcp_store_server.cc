// The TCP store server: one Boost.Asio thread, every operation asynchronous. All state below is touched only on that
// thread (stats are atomics), so there are no locks.
#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <cerrno>
#include <list>
#include <thread>
#include <unordered_map>
#include <vector>

#include "collectives/store/tcp_store.h"
#include "core/error.h"
#include "core/logging.h"

namespace dt {

namespace asio = boost::asio;
using asio::ip::tcp;
namespace sp = store_protocol;

namespace {

class Session;

// A get() or wait() parked until its keys exist. It is listed under exactly one key at a time: the first missing one.
struct Waiter {
  Waiter(asio::io_context& io, std::shared_ptr<Session> s, std::vector<std::string> k, bool get)
      : session(std::move(s)), keys(std::move(k)), is_get(get), timer(io) {}
  std::shared_ptr<Session> session;
  std::vector<std::string> keys;
  bool is_get;
  asio::steady_timer timer;
  std::string listed_under;
  bool done = false;
};

void set_cloexec(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

bool is_disconnect(const boost::system::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::operation_aborted;
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(TcpStoreServerOptions options);
  ~Impl() { stop(); }

  void stop();
  Stats stats() const { return Stats{accepted_.load(), authenticated_.load(), rejected_.load()}; }

  // --- io thread only ---
  void accept();
  void shutdown_in_io();
  bool present(const std::string& key) const { return data_.count(key) > 0; }
  void on_key_created(const std::string& key);
  void park(const std::shared_ptr<Waiter>& w);
  void unlist(const std::shared_ptr<Waiter>& w);
  void finish(const std::shared_ptr<Waiter>& w);
  void expire(const std::shared_ptr<Waiter>& w);
  // Rejection lines are rate-limited, so that a flood or a port scan cannot flood the log.
  bool allow_rejection_log();

  asio::io_context io_;  // first member: destroyed last, after everything that refers to it
  TcpStoreServerOptions opts_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  std::string host_;
  int port_ = 0;
  std::thread thread_;
  std::mutex stop_mu_;
  bool stopped_ = false;

  std::unordered_map<std::string, std::string> data_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Waiter>>> waiters_;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;
  int unauthenticated_ = 0;
  std::chrono::steady_clock::time_point log_window_start_{};
  int logged_in_window_ = 0;
  int64_t suppressed_logs_ = 0;

  std::atomic<int64_t> accepted_{0}, authenticated_{0}, rejected_{0};
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(TcpStoreServer::Impl& server, tcp::socket socket, std::string peer)
      : server_(server), socket_(std::move(socket)), auth_timer_(server.io_), peer_(std::move(peer)) {}

  void start();
  // Closes the connection. A non-empty `rejection` is logged and counted as a rejection.
  void close(const std::string& rejection);
  void send(std::string frame);
  void set_waiter(std::shared_ptr<Waiter> w) { waiter_ = std::move(w); }
  // While a get()/wait() is parked: closes the connection as soon as the client leaves (Note [parked sessions]).
  void watch_while_parked();
  void clear_waiter() { waiter_.reset(); }
  const std::string& peer() const { return peer_; }

 private:
  void read_auth();
  void on_auth();
  void read_header();
  void read_body();
  void handle_request();
  void reply_error(ErrorCode code, const std::string& message);

  TcpStoreServer::Impl& server_;
  tcp::socket socket_;
  asio::steady_timer auth_timer_;
  std::string peer_;
  sp::Nonce server_nonce_{};
  std::array<uint8_t, sp::kServerHelloBytes> hello_{};
  std::array<uint8_t, sp::kClientAuthBytes> auth_{};
  std::array<uint8_t, sp::kServerAcceptBytes> accept_{};
  std::array<uint8_t, 4> header_{};
  std::vector<uint8_t> body_;  // allocated only after authentication
  std::string out_;
  std::shared_ptr<Waiter> waiter_;
  bool authed_ = false;
  bool closed_ = false;
};

void Session::start() {
  ++server_.unauthenticated_;
  sp::random_bytes(server_nonce_.data(), server_nonce_.size());
  std::copy(sp::kServerHelloMagic.begin(), sp::kServerHelloMagic.end(), hello_.begin());
  std::copy(server_nonce_.begin(), server_nonce_.end(), hello_.begin() + 4);
  auto self = shared_from_this();
  auth_timer_.expires_after(server_.opts_.auth_timeout);
  auth_timer_.async_wait([self](const boost::system::error_code& ec) {
    if (ec || self->authed_ || self->closed_) return;
    self->close(str_cat("did not authenticate within ", format_duration(self->server_.opts_.auth_timeout)));
  });
  asio::async_write(socket_, asio::buffer(hello_), [self](const boost::system::error_code& ec, size_t) {
    if (ec) return self->close(str_cat("connection lost before authenticating (", ec.message(), ")"));
    self->read_auth();
  });
}

void Session::read_auth() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(auth_), [self](const boost::system::error_code& ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close(str_cat("closed the connection before authenticating (", ec.message(), ")"));
    self->on_auth();
  });
}

void Session::on_auth() {
  const uint8_t* p = auth_.data();
  if (!std::equal(sp::kClientAuthMagic.begin(), sp::kClientAuthMagic.end(), p)) {
    return close("sent bytes that are not a dtensor store handshake");
  }
  sp::Nonce client_nonce;
  std::copy(p + 4, p + 4 + sp::kNonceBytes, client_nonce.begin());
  sp::Mac expected = sp::client_mac(server_.opts_.secret, server_nonce_, client_nonce);
  if (!sp::mac_equal(expected.data(), p + 4 + sp::kNonceBytes)) {
    return close("failed authentication (wrong secret: is DT_STORE_SECRET the same on every rank?)");
  }
  authed_ = true;
  --server_.unauthenticated_;
  ++server_.authenticated_;
  auth_timer_.cancel();
  sp::Mac proof = sp::server_mac(server_.opts_.secret, server_nonce_, client_nonce);
  std::copy(sp::kServerAcceptMagic.begin(), sp::kServerAcceptMagic.end(), accept_.begin());
  std::copy(proof.begin(), proof.end(), accept_.begin() + 4);
  DT_LOG_DEBUG("store server: ", peer_, " authenticated");
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(accept_), [self](const boost::system::error_code& ec, size_t) {
    if (ec) return self->close("");
    self->read_header();
  });
}

void Session::read_header() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(header_), [self](const boost::system::error_code& ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close(is_disconnect(ec) ? "" : str_cat("read failed (", ec.message(), ")"));
    uint32_t len = sp::load_u32(self->header_.data());
    if (len == 0 || len > self->server_.opts_.max_message_bytes) {
      return self->close(
          str_cat("sent a frame of ", len, " bytes (limit ", self->server_.opts_.max_message_bytes, ")"));
    }
    self->body_.resize(len);
    self->read_body();
  });
}

void Session::read_body() {
  auto self = shared_from_this();
  asio::async_read(socket_, asio::buffer(body_), [self](const boost::system::error_code& ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close(is_disconnect(ec) ? "" : str_cat("read failed (", ec.message(), ")"));
    try {
      self->handle_request();
    } catch (const Error& e) {
      self->reply_error(e.code(), e.what());
    } catch (const std::exception& e) {
      self->close(str_cat("request failed: ", e.what()));
    }
  });
}

void Session::send(std::string frame) {
  if (closed_) return;
  out_ = std::move(frame);
  // Large values are not kept twice: the request body is no longer needed.
  std::vector<uint8_t>().swap(body_);
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(out_), [self](const boost::system::error_code& ec, size_t) {
    if (self->closed_) return;
    if (ec) return self->close("");
    std::string().swap(self->out_);
    self->read_header();
  });
}

// Note [parked sessions]
// A get() or wait() whose keys are missing parks the session until they appear or its timeout (chosen by the client,
// up to 30 days) expires, and the session reads nothing meanwhile. Without a watch, a client that died or gave up
// while parked would hold its socket and session on the server until that timeout. So a parked session waits for its
// socket to become readable: at EOF or an error the client is gone and the session closes; data means a new request
// before the reply to the pending one, which no client of this protocol sends (its calls are serialized on the
// connection), so the connection is rejected. The wait consumes nothing; once the waiter has finished, a late wake-up
// is ignored (the session is reading frames again).
void Session::watch_while_parked() {
  auto self = shared_from_this();
  std::weak_ptr<Waiter> parked = waiter_;
  socket_.async_wait(tcp::socket::wait_read, [self, parked](const boost::system::error_code& ec) {
    auto w = parked.lock();
    if (self->closed_ || !w || w->done || self->waiter_ != w) return;
    if (ec) return self->close(is_disconnect(ec) ? "" : str_cat("wait failed (", ec.message(), ")"));
    uint8_t probe = 0;
    const ssize_t n = ::recv(self->socket_.native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return self->watch_while_parked();
    if (n <= 0) return self->close("");
    self->close("sent a request while its get/wait was still pending");
  });
}

void Session::reply_error(ErrorCode code, const std::string& message) {
  // The client's own error adds its rank: drop this process's.
  std::string msg = message;
  const std::string prefix = rank_prefix();
  if (!prefix.empty() && msg.rfind(prefix, 0) == 0) msg.erase(0, prefix.size());
  sp::Writer w;
  w.u8(static_cast<uint8_t>(sp::Status::kError)).u8(static_cast<uint8_t>(code)).str(msg);
  send(w.frame());
}

void Session::close(const std::string& rejection) {
  if (closed_) return;
  closed_ = true;
  if (!rejection.empty()) {
    ++server_.rejected_;
    if (server_.allow_rejection_log()) {
      DT_LOG_WARN("store server: rejected connection from ", peer_, ": ", rejection);
    }
  }
  if (!authed_) --server_.unauthenticated_;
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  auth_timer_.cancel();
  if (waiter_) {
    auto w = std::move(waiter_);
    w->done = true;
    w->timer.cancel();
    server_.unlist(w);
    w->session.reset();
  }
  server_.sessions_.erase(this);
}

uint64_t clamp_wait_ms(uint64_t ms) {
  constexpr uint64_t kMax = 30ull * 24 * 3600 * 1000;  // 30 days: keeps time_point arithmetic far from overflow
  return std::min(ms, kMax);
}

void Session::handle_request() {
  auto& srv = server_;
  sp::Reader r(body_.data(), body_.size());
  uint8_t op_byte = 0;
  r.u8(&op_byte);
  auto malformed = [&] { close(str_cat("sent a malformed request (op ", static_cast<int>(op_byte), ")")); };
  sp::Writer ok;
  ok.u8(static_cast<uint8_t>(sp::Status::kOk));
  switch (static_cast<sp::Op>(op_byte)) {
    case sp::Op::kSet: {
      std::string key, value;
      if (!r.str(&key) || !r.str(&value) || !r.done()) return malformed();
      auto [it, created] = srv.data_.insert_or_assign(std::move(key), std::move(value));
      send(ok.frame());
      if (created) srv.on_key_created(it->first);
      return;
    }
    case sp::Op::kGet:
    case sp::Op::kWait: {
      bool is_get = static_cast<sp::Op>(op_byte) == sp::Op::kGet;
      std::vector<std::string> keys;
      uint64_t timeout_ms = 0;
      if (is_get) {
        std::string key;
        if (!r.str(&key)) return malformed();
        keys.push_back(std::move(key));
      } else {
        uint32_t n = 0;
        if (!r.u32(&n) || n == 0) return malformed();
        for (uint32_t i = 0; i < n; ++i) {
          std::string key;
          if (!r.str(&key)) return malformed();
          keys.push_back(std::move(key));
        }
      }
      if (!r.u64(&timeout_ms) || !r.done()) return malformed();
      bool all = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return srv.present(k); });
      if (all) {
        if (is_get) ok.str(srv.data_.at(keys[0]));
        return send(ok.frame());
      }
      auto w = std::make_shared<Waiter>(srv.io_, shared_from_this(), std::move(keys), is_get);
      waiter_ = w;
      srv.park(w);
      watch_while_parked();
      w->timer.expires_after(std::chrono::milliseconds(clamp_wait_ms(timeout_ms)));
      TcpStoreServer::Impl* srvp = &srv;
      w->timer.async_wait([srvp, w](const boost::system::error_code& ec) {
        if (!ec) srvp->expire(w);
      });
      return;
    }
    case sp::Op::kAdd: {
      std::string key;
      int64_t delta = 0;
      if (!r.str(&key) || !r.i64(&delta) || !r.done()) return malformed();
      auto it = srv.data_.find(key);
      int64_t v = store_detail::add_to_value(key, it == srv.data_.end() ? nullptr : &it->second, delta);
      bool created = it == srv.data_.end();
      srv.data_[key] = std::to_string(v);
      send(ok.i64(v).frame());
      if (created) srv.on_key_created(key);
      return;
    }
    case sp::Op::kCompareSet: {
      std::string key, expected, desired;
      uint8_t has_expected = 0;
      if (!r.str(&key) || !r.u8(&has_expected) || !r.str(&expected) || !r.str(&desired) || !r.done()) {
        return malformed();
      }
      auto it = srv.data_.find(key);
      bool absent = it == srv.data_.end();
      bool match = has_expected ? (!absent && it->second == expected) : absent;
      if (match) {
        srv.data_[key] = desired;
        send(ok.u8(1).u8(1).str(desired).frame());
        if (absent) srv.on_key_created(key);
      } else if (absent) {
        send(ok.u8(0).u8(0).str("").frame());
      } else {
        send(ok.u8(0).u8(1).str(it->second).frame());
      }
      return;
    }
    case sp::Op::kDelete: {
      std::string key;
      if (!r.str(&key) || !r.done()) return malformed();
      return send(ok.u8(srv.data_.erase(key) > 0 ? 1 : 0).frame());
    }
    case sp::Op::kCheck: {
      uint32_t n = 0;
      if (!r.u32(&n)) return malformed();
      bool all = true;
      for (uint32_t i = 0; i < n; ++i) {
        std::string key;
        if (!r.str(&key)) return malformed();
        all = all && srv.present(key);
      }
      if (!r.done()) return malformed();
      return send(ok.u8(all ? 1 : 0).frame());
    }
  }
  close(str_cat("sent an unknown request op ", static_cast<int>(op_byte)));
}

}  // namespace

// --- Impl -------------------------------------------------------------------------------------------------------

TcpStoreServer::Impl::Impl(TcpStoreServerOptions options)
    : opts_(std::move(options)), acceptor_(io_), accept_retry_(io_), host_(opts_.host) {
  DT_CHECK_ARG(!opts_.secret.empty(), "TcpStoreServer: the secret must be non-empty (DT_STORE_SECRET)");
  DT_CHECK_ARG(!opts_.host.empty(), "TcpStoreServer: the bind address must be non-empty");
  DT_CHECK_ARG(opts_.port >= 0 && opts_.port <= 65535, "TcpStoreServer: port must be in 0..65535, got ", opts_.port);
  DT_CHECK_ARG(opts_.auth_timeout.count() > 0, "TcpStoreServer: auth_timeout must be > 0");
  DT_CHECK_ARG(opts_.max_message_bytes >= 64, "TcpStoreServer: max_message_bytes must be >= 64, got ",
               opts_.max_message_bytes);
  DT_CHECK_ARG(opts_.max_unauthenticated > 0, "TcpStoreServer: max_unauthenticated must be > 0");
  std::string where = str_cat(opts_.host, ":", opts_.port);
  boost::system::error_code ec;
  tcp::resolver resolver(io_);
  auto results = resolver.resolve(opts_.host, std::to_string(opts_.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) DT_THROW(SystemError, "store server: cannot resolve ", where, ": ", ec.message());
  tcp::endpoint ep = results.begin()->endpoint();
  acceptor_.open(ep.protocol(), ec);
  if (!ec) set_cloexec(acceptor_.native_handle());
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    DT_THROW(SystemError, "store server: cannot listen on ", where, ": ", ec.message(),
             opts_.port != 0 ? " (is the port in use? DT_MASTER_PORT / --master-port picks it)" : "");
  }
  port_ = acceptor_.local_endpoint().port();
  accept();
  thread_ = std::thread([this] {
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        DT_LOG_ERROR("store server: unexpected error, continuing: ", e.what());
      }
    }
  });
  DT_LOG_INFO("store server listening on ", opts_.host, ":", port_);
}

void TcpStoreServer::Impl::accept() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: back off instead of spinning.
      DT_LOG_WARN("store server: accept failed: ", ec.message());
      accept_retry_.expires_after(std::chrono::milliseconds(100));
      accept_retry_.async_wait([this](const boost::system::error_code& e) {
        if (!e) accept();
      });
      return;
    }
    ++accepted_;
    set_cloexec(socket.native_handle());
    boost::system::error_code ignored;
    auto rep = socket.remote_endpoint(ignored);
    std::string peer = ignored ? std::string("?") : str_cat(rep.address().to_string(), ":", rep.port());
    if (unauthenticated_ >= opts_.max_unauthenticated) {
      ++rejected_;
      if (allow_rejection_log()) {
        DT_LOG_WARN("store server: rejected connection from ", peer, ": ", unauthenticated_,
                    " connections are already authenticating");
      }
      socket.close(ignored);
    } else {
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<Session>(*this, std::move(socket), std::move(peer));
      sessions_[s.get()] = s;
      try {
        s->start();
      } catch (const std::exception& e) {
        s->close(str_cat("could not start the handshake: ", e.what()));
      }
    }
    accept();
  });
}

bool TcpStoreServer::Impl::allow_rejection_log() {
  constexpr int kLinesPerWindow = 20;
  constexpr auto kWindow = std::chrono::seconds(10);
  auto now = std::chrono::steady_clock::now();
  if (now - log_window_start_ >= kWindow) {
    if (suppressed_logs_ > 0) {
      DT_LOG_WARN("store server: ", suppressed_logs_, " more rejected connections were not logged");
    }
    log_window_start_ = now;
    logged_in_window_ = 0;
    suppressed_logs_ = 0;
  }
  if (logged_in_window_ < kLinesPerWindow) {
    ++logged_in_window_;
    return true;
  }
  ++suppressed_logs_;
  return false;
}

void TcpStoreServer::Impl::park(const std::shared_ptr<Waiter>& w) {
  for (const auto& k : w->keys) {
    if (!present(k)) {
      w->listed_under = k;
      waiters_[k].push_back(w);
      return;
    }
  }
  finish(w);
}

void TcpStoreServer::Impl::unlist(const std::shared_ptr<Waiter>& w) {
  auto it = waiters_.find(w->listed_under);
  if (it == waiters_.end()) return;
  auto& v = it->second;
  v.erase(std::remove(v.begin(), v.end(), w), v.end());
  if (v.empty()) waiters_.erase(it);
}

void TcpStoreServer::Impl::on_key_created(const std::string& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<std::shared_ptr<Waiter>> list = std::move(it->second);
  waiters_.erase(it);
  for (auto& w : list) {
    if (!w->done) park(w);  // lists it under its next missing key, or finishes it
  }
}

void TcpStoreServer::Impl::finish(const std::shared_ptr<Waiter>& w) {
  w->done = true;
  w->timer.cancel();
  sp::Writer out;
  out.u8(static_cast<uint8_t>(sp::Status::kOk));
  if (w->is_get) out.str(data_.at(w->keys[0]));
  auto s = std::move(w->session);
  s->clear_waiter();
  s->send(out.frame());
}

void TcpStoreServer::Impl::expire(const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  w->done = true;
  unlist(w);
  std::vector<std::string> missing;
  for (const auto& k : w->keys)
    if (!present(k)) missing.push_back(k);
  sp::Writer out;
  out.u8(static_cast<uint8_t>(sp::Status::kTimeout)).u32(static_cast<uint32_t>(missing.size()));
  for (const auto& k : missing) out.str(k);
  auto s = std::move(w->session);
  s->clear_waiter();
  s->send(out.frame());
}

void TcpStoreServer::Impl::shutdown_in_io() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  std::vector<std::shared_ptr<Session>> live;
  for (auto& [ptr, weak] : sessions_)
    if (auto s = weak.lock()) live.push_back(std::move(s));
  for (auto& s : live) s->close("");
  for (auto& [key, list] : waiters_)
    for (auto& w : list) {
      w->timer.cancel();
      w->session.reset();
    }
  waiters_.clear();
  sessions_.clear();
}

void TcpStoreServer::Impl::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    asio::post(io_, [this] {
      shutdown_in_io();
      io_.stop();
    });
    thread_.join();
  }
  // The thread is gone: finish any cleanup it did not get to.
  shutdown_in_io();
}

// --- public ------------------------------------------------------------------------------------------------------

TcpStoreServer::TcpStoreServer(TcpStoreServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpStoreServer::~TcpStoreServer() = default;
const std::string& TcpStoreServer::host() const { return impl_->host_; }
int TcpStoreServer::port() const { return impl_->port_; }
void TcpStoreServer::stop() { impl_->stop(); }
TcpStoreServer::Stats TcpStoreServer::stats() const { return impl_->stats(); }

}  // namespace dt
