#include "collectives/store/store_protocol.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "core/error.h"

namespace dt::store_protocol {

namespace {

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

Mac mac_of(std::string_view label, std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  uint8_t msg[32 + 2 * kNonceBytes];
  DT_ASSERT(label.size() <= 32);
  size_t n = 0;
  std::memcpy(msg, label.data(), label.size());
  n += label.size();
  std::memcpy(msg + n, server_nonce.data(), kNonceBytes);
  n += kNonceBytes;
  std::memcpy(msg + n, client_nonce.data(), kNonceBytes);
  n += kNonceBytes;
  Mac out{};
  unsigned int out_len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg, n, out.data(), &out_len) == nullptr ||
      out_len != kMacBytes) {
    DT_THROW(SystemError, "store authentication: HMAC-SHA256 failed: ", openssl_error());
  }
  return out;
}

}  // namespace

void random_bytes(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) DT_THROW(SystemError, "RAND_bytes failed: ", openssl_error());
}

std::string random_hex(size_t n) {
  std::string raw(n, '\0');
  random_bytes(reinterpret_cast<uint8_t*>(raw.data()), n);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned char c : raw) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

Mac client_mac(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return mac_of("dtstore-v1 client", secret, server_nonce, client_nonce);
}

Mac server_mac(std::string_view secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return mac_of("dtstore-v1 server", secret, server_nonce, client_nonce);
}

bool mac_equal(const uint8_t* a, const uint8_t* b) { return CRYPTO_memcmp(a, b, kMacBytes) == 0; }

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

Writer& Writer::u8(uint8_t v) {
  body_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) body_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

Writer& Writer::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) body_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

Writer& Writer::str(std::string_view s) {
  DT_CHECK_ARG(s.size() <= 0xffffffffu, "store: a string of ", s.size(), " bytes does not fit a u32 length");
  u32(static_cast<uint32_t>(s.size()));
  body_.append(s.data(), s.size());
  return *this;
}

std::string Writer::frame() const {
  DT_CHECK_ARG(body_.size() <= 0xffffffffu, "store: a message of ", body_.size(), " bytes is too large");
  std::string out(4, '\0');
  store_u32(reinterpret_cast<uint8_t*>(out.data()), static_cast<uint32_t>(body_.size()));
  out += body_;
  return out;
}

bool Reader::u8(uint8_t* v) {
  if (n_ < 1) return false;
  *v = p_[0];
  p_ += 1;
  n_ -= 1;
  return true;
}

bool Reader::u32(uint32_t* v) {
  if (n_ < 4) return false;
  *v = load_u32(p_);
  p_ += 4;
  n_ -= 4;
  return true;
}

bool Reader::u64(uint64_t* v) {
  if (n_ < 8) return false;
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x |= static_cast<uint64_t>(p_[i]) << (8 * i);
  *v = x;
  p_ += 8;
  n_ -= 8;
  return true;
}

bool Reader::i64(int64_t* v) {
  uint64_t x;
  if (!u64(&x)) return false;
  *v = static_cast<int64_t>(x);
  return true;
}

bool Reader::str(std::string* s) {
  if (n_ < 4) return false;
  uint32_t len = load_u32(p_);
  if (n_ - 4 < len) return false;
  s->assign(reinterpret_cast<const char*>(p_ + 4), len);
  p_ += 4 + len;
  n_ -= 4 + len;
  return true;
}

}  // namespace dt::store_protocol
