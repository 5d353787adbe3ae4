// Wire protocol of the TCP store, shared by the server, the client and the tests that attack the server.
//
// Note [store authentication]
// The per-job secret never crosses the wire. On accept the server sends a hello with a fresh random nonce; the
// client answers with its own nonce and HMAC-SHA256(secret, "dtstore-v1 client" || server_nonce || client_nonce);
// the server checks it (constant time) and answers with HMAC-SHA256(secret, "dtstore-v1 server" || server_nonce ||
// client_nonce), so the client also knows it reached a server holding the secret. Every connection gets a new server
// nonce, so a recorded transcript replayed on a new connection does not authenticate. Before authentication every
// message has a fixed size (there is no length field to abuse), the server holds only fixed buffers for the
// connection, and a connection that does not authenticate within the auth deadline is closed. After authentication
// traffic is neither encrypted nor integrity-protected: the store binds to loopback by default; across machines, run
// it on a trusted network.
//
// Handshake (fixed sizes):
//   server -> client  "DTS1" nonce_s[32]
//   client -> server  "DTC1" nonce_c[32] mac_c[32]
//   server -> client  "DTOK" mac_s[32]          (on failure the server closes the connection without answering)
// Then frames: u32 body length (little-endian, 1..max_message_bytes), body. Request body: u8 Op, fields. Reply body:
// u8 Status, fields. Fields: u8, u32, u64/i64 (little-endian), strings as u32 length + bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dt::store_protocol {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
inline constexpr std::string_view kServerHelloMagic = "DTS1";
inline constexpr std::string_view kClientAuthMagic = "DTC1";
inline constexpr std::string_view kServerAcceptMagic = "DTOK";
inline constexpr size_t kServerHelloBytes = 4 + kNonceBytes;
inline constexpr size_t kClientAuthBytes = 4 + kNonceBytes + kMacBytes;
inline constexpr size_t kServerAcceptBytes = 4 + kMacBytes;
inline constexpr uint32_t kDefaultMaxMessageBytes = 64u << 20;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

enum class Op : uint8_t {
  kSet = 1,         // key, value                      -> ok
  kGet = 2,         // key, u64 timeout_ms             -> ok value | timeout
  kAdd = 3,         // key, i64 delta                  -> ok i64
  kCompareSet = 4,  // key, u8 has_expected, expected, desired -> ok u8 swapped, u8 has_value, value
  kWait = 5,        // u32 n, n keys, u64 timeout_ms   -> ok | timeout
  kDelete = 6,      // key                             -> ok u8 existed
  kCheck = 7,       // u32 n, n keys                   -> ok u8 all_present
};

enum class Status : uint8_t {
  kOk = 0,
  kTimeout = 1,  // u32 n, n missing keys
  kError = 2,    // u8 dt::ErrorCode, message
};

// Cryptographically random bytes (OpenSSL RAND_bytes). Throws dt::SystemError on failure.
void random_bytes(uint8_t* out, size_t n);
// 2*n lowercase hex digits of n random bytes: the per-job secret dtrun generates.
std::string random_hex(size_t n);

Mac client_mac(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);
Mac server_mac(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce);
// Constant-time comparison.
bool mac_equal(const uint8_t* a, const uint8_t* b);

// Builds a frame: appends fields, then frame() prefixes the length.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& str(std::string_view s);
  size_t body_size() const { return body_.size(); }
  // The body with its 4-byte length prefix.
  std::string frame() const;
  const std::string& body() const { return body_; }

 private:
  std::string body_;
};

// Reads fields from a body; every getter returns false (and reads nothing) when the body is too short.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  bool u8(uint8_t* v);
  bool u32(uint32_t* v);
  bool u64(uint64_t* v);
  bool i64(int64_t* v);
  bool str(std::string* s);
  bool done() const { return n_ == 0; }
  size_t remaining() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
};

uint32_t load_u32(const uint8_t* p);
void store_u32(uint8_t* p, uint32_t v);

}  // namespace dt::store_protocol
