#include "net/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>
#include <cstring>

#include "common/settings.h"
#include "net/socket.h"
#include "tutti/error.h"
#include "tutti/store.h"

namespace tutti::detail {
namespace {

void put_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint16_t get_u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Nonce fresh_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw Error(ErrorKind::Internal, "RAND_bytes failed: the system's random source is unavailable");
  return n;
}

const char* role_name(std::uint16_t role) {
  switch (role) {
    case static_cast<std::uint16_t>(AuthRole::Store):
      return "a store client";
    case static_cast<std::uint16_t>(AuthRole::Peer):
      return "a rank";
    default:
      return "an unknown role";
  }
}

// HMAC-SHA256(key, label | role | a | b).
Mac mac(const std::string& key, const char* label, AuthRole role, const Nonce& a, const Nonce& b) {
  std::uint8_t msg[32 + 2 + 2 * kAuthNonceBytes];
  std::size_t len = std::strlen(label);
  std::memcpy(msg, label, len);
  put_u16(msg + len, static_cast<std::uint16_t>(role));
  len += 2;
  std::memcpy(msg + len, a.data(), a.size());
  len += a.size();
  std::memcpy(msg + len, b.data(), b.size());
  len += b.size();
  Mac out{};
  unsigned int out_len = 0;
  // A key of length 0 still needs a valid pointer.
  static const std::uint8_t kEmpty = 0;
  const void* k = key.empty() ? static_cast<const void*>(&kEmpty) : key.data();
  if (!HMAC(EVP_sha256(), k, static_cast<int>(key.size()), msg, len, out.data(), &out_len) || out_len != out.size())
    throw Error(ErrorKind::Internal, "HMAC-SHA256 failed in libcrypto");
  return out;
}

constexpr const char* kServerLabel = "tutti-auth-1 server";
constexpr const char* kClientLabel = "tutti-auth-1 client";

bool equal(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace

std::string random_hex(std::size_t bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  while (bytes > 0) {
    Nonce n = fresh_nonce();
    for (std::size_t i = 0; i < n.size() && bytes > 0; ++i, --bytes) {
      out += kHex[n[i] >> 4];
      out += kHex[n[i] & 15];
    }
  }
  return out;
}

std::array<std::uint8_t, kAuthHelloBytes> auth_client_hello(AuthRole role, Nonce* client_nonce) {
  *client_nonce = fresh_nonce();
  std::array<std::uint8_t, kAuthHelloBytes> out{};
  put_u32(out.data(), kAuthHelloMagic);
  put_u16(out.data() + 4, kAuthVersion);
  put_u16(out.data() + 6, static_cast<std::uint16_t>(role));
  std::memcpy(out.data() + 8, client_nonce->data(), kAuthNonceBytes);
  return out;
}

std::string auth_server_answer(const std::uint8_t* hello, const std::string& key, AuthRole expected,
                               AuthServerState* state, std::array<std::uint8_t, kAuthAnswerBytes>* answer) {
  if (get_u32(hello) != kAuthHelloMagic) return "is not a tutti client (it did not start with an authentication hello)";
  std::uint16_t version = get_u16(hello + 4);
  if (version != kAuthVersion)
    return "speaks authentication version " + std::to_string(version) + ", this side " + std::to_string(kAuthVersion);
  std::uint16_t role = get_u16(hello + 6);
  if (role != static_cast<std::uint16_t>(expected))
    return std::string("is ") + role_name(role) + " but connected to the port of " +
           (expected == AuthRole::Store ? "a store server" : "a rank");
  state->role = expected;
  std::memcpy(state->client_nonce.data(), hello + 8, kAuthNonceBytes);
  state->server_nonce = fresh_nonce();
  Mac m = mac(key, kServerLabel, expected, state->client_nonce, state->server_nonce);
  put_u32(answer->data(), kAuthAnswerMagic);
  put_u16(answer->data() + 4, kAuthVersion);
  put_u16(answer->data() + 6, static_cast<std::uint16_t>(expected));
  std::memcpy(answer->data() + 8, state->server_nonce.data(), kAuthNonceBytes);
  std::memcpy(answer->data() + 8 + kAuthNonceBytes, m.data(), m.size());
  return "";
}

std::string auth_client_proof(const std::uint8_t* answer, const std::string& key, AuthRole role,
                              const Nonce& client_nonce, Mac* proof) {
  if (get_u32(answer) != kAuthAnswerMagic) return "is not a tutti endpoint (no authentication answer)";
  std::uint16_t version = get_u16(answer + 4);
  if (version != kAuthVersion)
    return "speaks authentication version " + std::to_string(version) + ", this side " + std::to_string(kAuthVersion);
  if (get_u16(answer + 6) != static_cast<std::uint16_t>(role))
    return std::string("is not ") + (role == AuthRole::Store ? "a store server" : "a rank");
  Nonce server_nonce{};
  std::memcpy(server_nonce.data(), answer + 8, kAuthNonceBytes);
  Mac expect = mac(key, kServerLabel, role, client_nonce, server_nonce);
  if (!equal(expect.data(), answer + 8 + kAuthNonceBytes, kAuthMacBytes))
    return "does not know this job's secret (its answer to the challenge is wrong): the two sides have "
           "different TUTTI_JOB_SECRET values, or it belongs to another job";
  *proof = mac(key, kClientLabel, role, server_nonce, client_nonce);
  return "";
}

bool auth_server_check_proof(const std::uint8_t* proof, const std::string& key, const AuthServerState& state) {
  Mac expect = mac(key, kClientLabel, state.role, state.server_nonce, state.client_nonce);
  return equal(expect.data(), proof, kAuthMacBytes);
}

void authenticate_to_server(int fd, const std::string& key, AuthRole role, TimePoint deadline, const std::string& who) {
  Nonce client_nonce{};
  auto hello = auth_client_hello(role, &client_nonce);
  write_full(fd, hello.data(), hello.size(), deadline, who);
  std::array<std::uint8_t, kAuthAnswerBytes> answer{};
  read_full(fd, answer.data(), answer.size(), deadline, who);
  Mac proof{};
  std::string bad = auth_client_proof(answer.data(), key, role, client_nonce, &proof);
  if (!bad.empty()) throw Error(ErrorKind::Unauthenticated, who + " " + bad);
  write_full(fd, proof.data(), proof.size(), deadline, who);
}

std::string authenticate_client(int fd, const std::string& key, AuthRole role, TimePoint deadline) {
  try {
    std::array<std::uint8_t, kAuthHelloBytes> hello{};
    read_full(fd, hello.data(), hello.size(), deadline, "client");
    AuthServerState state;
    std::array<std::uint8_t, kAuthAnswerBytes> answer{};
    std::string bad = auth_server_answer(hello.data(), key, role, &state, &answer);
    if (!bad.empty()) return bad;
    write_full(fd, answer.data(), answer.size(), deadline, "client");
    Mac proof{};
    read_full(fd, proof.data(), proof.size(), deadline, "client");
    if (!auth_server_check_proof(proof.data(), key, state))
      return "failed the job-secret check (it does not know this job's TUTTI_JOB_SECRET)";
    return "";
  } catch (const Error& e) {
    return "broke off the authentication: " + e.message();
  }
}

}  // namespace tutti::detail

std::string tutti::job_secret_from_env() { return tutti::detail::setting_env("TUTTI_JOB_SECRET"); }
