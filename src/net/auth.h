#pragma once
// Mutual challenge-response authentication of every store and peer
// connection with the job secret (HMAC-SHA256 from OpenSSL's libcrypto).
//
// The connecting side speaks first; the secret itself never crosses the wire:
//
//   client -> server  Hello  (40 B): magic "TUTA", version, role, client nonce (32 B)
//   server -> client  Answer (72 B): magic "TUTR", version, role, server nonce (32 B),
//                                    HMAC(key, "tutti-auth-1 server" | role | client nonce | server nonce)
//   client -> server  Proof  (32 B): HMAC(key, "tutti-auth-1 client" | role | server nonce | client nonce)
//
// The client checks the server's answer before proving itself, so a process
// with the wrong secret learns it at once (Unauthenticated); a stranger that
// fails the check is refused and logged by the server, which keeps serving
// everyone else. The labels differ by direction, so an answer can never be
// replayed as a proof; fresh nonces on both sides make every exchange unique.
// The role keeps a store client from being taken for a peer and vice versa.
// With no secret configured the key is empty: connections are then checked
// for the protocol only (see docs/configuration.md, TUTTI_JOB_SECRET).

#include <array>
#include <cstdint>
#include <string>

#include "common/completion.h"

namespace tutti::detail {

enum class AuthRole : std::uint16_t { Store = 1, Peer = 2 };

inline constexpr std::size_t kAuthNonceBytes = 32;
inline constexpr std::size_t kAuthMacBytes = 32;
inline constexpr std::size_t kAuthHelloBytes = 8 + kAuthNonceBytes;                   // 40
inline constexpr std::size_t kAuthAnswerBytes = 8 + kAuthNonceBytes + kAuthMacBytes;  // 72
inline constexpr std::size_t kAuthProofBytes = kAuthMacBytes;                         // 32
inline constexpr std::uint32_t kAuthHelloMagic = 0x41545554;                          // "TUTA"
inline constexpr std::uint32_t kAuthAnswerMagic = 0x52545554;                         // "TUTR"
inline constexpr std::uint16_t kAuthVersion = 1;

using Nonce = std::array<std::uint8_t, kAuthNonceBytes>;
using Mac = std::array<std::uint8_t, kAuthMacBytes>;

// `bytes` random bytes from the system's generator, as hex.
std::string random_hex(std::size_t bytes);

// The server's state between its answer and the client's proof.
struct AuthServerState {
  AuthRole role = AuthRole::Store;
  Nonce client_nonce{};
  Nonce server_nonce{};
};

// The client's first message, and the nonce it must remember.
std::array<std::uint8_t, kAuthHelloBytes> auth_client_hello(AuthRole role, Nonce* client_nonce);
// Server: checks a client's hello (exactly kAuthHelloBytes) and writes the
// answer. Returns "" when the hello is well formed, else why not (nothing
// written then).
std::string auth_server_answer(const std::uint8_t* hello, const std::string& key, AuthRole expected,
                               AuthServerState* state, std::array<std::uint8_t, kAuthAnswerBytes>* answer);
// Client: checks the server's answer (exactly kAuthAnswerBytes); on success
// writes the proof. Returns "" when the server knows the key, else why not.
std::string auth_client_proof(const std::uint8_t* answer, const std::string& key, AuthRole role,
                              const Nonce& client_nonce, Mac* proof);
// Server: true when the client's proof (exactly kAuthProofBytes) shows it knows the key.
bool auth_server_check_proof(const std::uint8_t* proof, const std::string& key, const AuthServerState& state);

// Blocking helpers on a blocking socket, bounded by `deadline`; `who` names
// the other side in messages.
// The connecting side: throws Unauthenticated when the server does not
// know the key, Timeout/PeerLost when the exchange breaks off.
void authenticate_to_server(int fd, const std::string& key, AuthRole role, TimePoint deadline, const std::string& who);
// The accepting side: "" when the client proved it knows the key, else why
// it is refused (never throws for what the client does).
std::string authenticate_client(int fd, const std::string& key, AuthRole role, TimePoint deadline);

}  // namespace tutti::detail
