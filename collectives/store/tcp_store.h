// TCP key-value store: a server (in rank 0's process on a background thread, or in dtrun) and a client that
// implements Store. Clients authenticate with a per-job secret by challenge-response (Note [store authentication] in
// store_protocol.h); the secret itself is never sent.
//
// Server: one Boost.Asio thread serves every connection asynchronously, so no client (a stalled one, one waiting in
// wait()) blocks the others. A connection that sends a wrong MAC, garbage, a frame over the size limit, or nothing
// within the auth deadline is closed with a DT_LOG_WARN line; the server keeps serving the others.
//
// Client: thread-safe; the calls of one TcpStore are serialized on its one connection, so a thread blocked in
// wait()/get() holds up the other threads using the same object (they fail at their own deadline). Give each thread
// that waits concurrently its own connection with clone().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/store/store.h"
#include "collectives/store/store_protocol.h"

namespace dt {

struct TcpStoreServerOptions {
  std::string host = "127.0.0.1";  // address to bind: loopback unless told otherwise ("0.0.0.0" = all IPv4)
  int port = 0;                    // 0 = pick a free port (see TcpStoreServer::port())
  std::string secret;              // required, non-empty
  StoreDuration auth_timeout = std::chrono::seconds(10);                 // a connection must authenticate within this
  uint32_t max_message_bytes = store_protocol::kDefaultMaxMessageBytes;  // frames above this close the connection
  int max_unauthenticated = 256;  // connections still authenticating; more are refused at accept
};

class TcpStoreServer {
 public:
  // Binds, listens and starts serving on a background thread. Throws dt::SystemError naming host:port when the
  // address cannot be bound, dt::InvalidArgument for bad options.
  explicit TcpStoreServer(TcpStoreServerOptions options);
  ~TcpStoreServer();  // stop()s
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  const std::string& host() const;
  int port() const;  // the bound port (the chosen one when options.port was 0)

  // Closes every connection and joins the thread. Idempotent.
  void stop();

  struct Stats {
    int64_t accepted = 0;       // connections accepted
    int64_t authenticated = 0;  // of which authenticated
    int64_t rejected = 0;       // closed for a failed or late authentication, a bad frame, or over the limit
  };
  Stats stats() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;        // required: 1..65535
  std::string secret;  // required, non-empty; the same as the server's
  // Default deadline of blocking calls; nullopt = default_store_timeout().
  std::optional<StoreDuration> timeout;
  // How long to keep retrying to connect (the server may start later); nullopt = the timeout above.
  std::optional<StoreDuration> connect_timeout;
  uint32_t max_message_bytes = store_protocol::kDefaultMaxMessageBytes;
};

class TcpStore final : public Store {
 public:
  // Connects and authenticates, retrying until options.connect_timeout. Throws dt::TimeoutError naming host:port
  // when the store cannot be reached in time, dt::RemoteError when the server rejects the secret. `server`, when
  // given, is kept alive as long as this store and its clones (rank 0 hosting the store in-process).
  explicit TcpStore(TcpStoreOptions options, std::shared_ptr<TcpStoreServer> server = nullptr);
  ~TcpStore() override;

  // A new connection to the same server, with the same options and server ownership.
  std::unique_ptr<TcpStore> clone() const;

  const std::string& host() const { return options_.host; }
  int port() const { return options_.port; }
  std::string address() const;  // "host:port"
  const std::shared_ptr<TcpStoreServer>& server() const { return server_; }

 protected:
  void do_set(const std::string& key, std::string_view value, StoreDuration timeout) override;
  std::string do_get(const std::string& key, StoreDuration timeout) override;
  int64_t do_add(const std::string& key, int64_t delta, StoreDuration timeout) override;
  CompareSetResult do_compare_set(const std::string& key, std::optional<std::string_view> expected,
                                  std::string_view desired, StoreDuration timeout) override;
  void do_wait(const std::vector<std::string>& keys, StoreDuration timeout) override;
  bool do_delete_key(const std::string& key, StoreDuration timeout) override;
  bool do_check(const std::vector<std::string>& keys, StoreDuration timeout) override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Reply {
    store_protocol::Status status;
    std::string body;  // the fields after the status byte
  };

  // *_locked: called with the turn held (or from the constructor/destructor, when nothing else can run).
  void connect_locked(Clock::time_point deadline);
  void close_locked();
  // Sends one request and reads its reply. `server_wait` (for get/wait) is how long the server may hold the reply.
  Reply call(const store_protocol::Writer& request, const std::string& what, StoreDuration timeout,
             StoreDuration server_wait);

  TcpStoreOptions options_;
  std::shared_ptr<TcpStoreServer> server_;
  // Serializes calls on the connection: a call holds busy_ for its round trip; others wait up to their deadline.
  // (A flag under a mutex rather than std::timed_mutex, whose timed lock ThreadSanitizer cannot follow.)
  class Turn;
  std::mutex mu_;
  std::condition_variable turn_cv_;
  bool busy_ = false;
  int fd_ = -1;
};

}  // namespace dt
