// unique_id.cpp - unique id encoding and the bootstrap secret.
#include "bootstrap/unique_id.hpp"

#include <arpa/inet.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace zcoll {
namespace {

constexpr char kMagic[4] = {'Z', 'C', 'I', 'D'};
constexpr uint16_t kVersion = 1;
constexpr size_t kChecksumOffset = 42;

void put16(char* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t get16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

uint64_t fnv1a(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void encodeUniqueId(const UniqueIdFields& f, char out[kUniqueIdBytes]) {
  std::memset(out, 0, kUniqueIdBytes);
  std::memcpy(out, kMagic, 4);
  put16(out + 4, kVersion);
  put16(out + 6, static_cast<uint16_t>(f.root.family()));
  put16(out + 8, static_cast<uint16_t>(f.root.port()));
  if (f.root.family() == AF_INET)
    std::memcpy(out + 10, &reinterpret_cast<const sockaddr_in*>(&f.root.storage)->sin_addr, 4);
  else
    std::memcpy(out + 10, &reinterpret_cast<const sockaddr_in6*>(&f.root.storage)->sin6_addr, 16);
  std::memcpy(out + 26, f.secret.data(), 16);
  uint32_t sum = static_cast<uint32_t>(fnv1a(out, kChecksumOffset));
  std::memcpy(out + kChecksumOffset, &sum, 4);
}

Status decodeUniqueId(const char in[kUniqueIdBytes], UniqueIdFields* out) {
  if (std::memcmp(in, kMagic, 4) != 0) return invalidArgument("commId: not a zcoll unique id (bad magic)");
  if (get16(in + 4) != kVersion) return invalidArgument("commId: unsupported unique id version {}", get16(in + 4));
  uint32_t sum;
  std::memcpy(&sum, in + kChecksumOffset, 4);
  if (sum != static_cast<uint32_t>(fnv1a(in, kChecksumOffset))) return invalidArgument("commId: corrupted (checksum)");
  for (size_t i = kChecksumOffset + 4; i < kUniqueIdBytes; ++i)
    if (in[i] != 0) return invalidArgument("commId: corrupted (trailing bytes)");
  UniqueIdFields f;
  int family = get16(in + 6);
  int port = get16(in + 8);
  if (port == 0) return invalidArgument("commId: port 0");
  if (family == AF_INET) {
    for (size_t i = 14; i < 26; ++i)  // an IPv4 address leaves the rest of the 16-byte field zero
      if (in[i] != 0) return invalidArgument("commId: corrupted (address padding)");
    auto* a = reinterpret_cast<sockaddr_in*>(&f.root.storage);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, in + 10, 4);
    f.root.len = sizeof(sockaddr_in);
  } else if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&f.root.storage);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, in + 10, 16);
    f.root.len = sizeof(sockaddr_in6);
  } else {
    return invalidArgument("commId: unknown address family {}", family);
  }
  f.root.setPort(port);
  std::memcpy(f.secret.data(), in + 26, 16);
  *out = f;
  return Status::ok();
}

Status randomSecret(Secret* out) {
  size_t got = 0;
  while (got < out->size()) {
    ssize_t n = getrandom(out->data() + got, out->size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return systemError("getrandom", errno);
    }
    got += static_cast<size_t>(n);
  }
  return Status::ok();
}

bool parseSecretHex(const std::string& hex, Secret* out) {
  if (hex.size() != 32) return false;
  Secret s{};
  for (size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return false;
    s[i / 2] = static_cast<uint8_t>(s[i / 2] | (i % 2 ? v : v << 4));
  }
  *out = s;
  return true;
}

std::string secretHex(const Secret& s) {
  std::string out;
  for (uint8_t b : s) out += fmt::format("{:02x}", b);
  return out;
}

bool secretsEqual(const Secret& a, const Secret& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace zcoll
