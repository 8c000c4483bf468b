// unique_id.hpp - the 128-byte unique id: root address, port and a 128-bit secret.
//
// Layout (all integers little endian): "ZCID" magic, u16 version, u16 family, u16 port, 16 address
// bytes, 16 secret bytes, u32 checksum (FNV-1a of the bytes before it); the rest is zero. Decoding
// rejects any id that was not produced by encodeUniqueId (wrong magic, version, family, checksum).
#pragma once

#include <array>
#include <cstdint>

#include "core/socket.hpp"
#include "core/status.hpp"

namespace zcoll {

inline constexpr size_t kUniqueIdBytes = 128;
using Secret = std::array<uint8_t, 16>;

struct UniqueIdFields {
  SockAddr root;
  Secret secret{};
};

void encodeUniqueId(const UniqueIdFields& fields, char out[kUniqueIdBytes]);
Status decodeUniqueId(const char in[kUniqueIdBytes], UniqueIdFields* out);

// 16 bytes from getrandom().
Status randomSecret(Secret* out);
// 32 hex digits <-> secret.
bool parseSecretHex(const std::string& hex, Secret* out);
std::string secretHex(const Secret& s);
bool secretsEqual(const Secret& a, const Secret& b);  // constant time

uint64_t fnv1a(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ull);

}  // namespace zcoll
