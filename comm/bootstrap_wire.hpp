// bootstrap_wire.hpp - the bootstrap's messages. Fixed-size, trivially copyable; a message that is
// not exactly one of these (magic, version, secret, sizes) is dropped by the receiver.
#pragma once

#include <cstdint>

#include "comm/bootstrap.hpp"

namespace zcoll::wire {

inline constexpr uint32_t kHelloMagic = 0x7a42484cu;  // "zBHL"
inline constexpr uint32_t kReplyMagic = 0x7a425250u;  // "zBRP"
inline constexpr uint32_t kRingMagic = 0x7a42524eu;   // "zBRN"
inline constexpr uint32_t kVersion = 1;
inline constexpr int32_t kMaxRanks = 1 << 20;

struct Hello {  // rank -> root
  uint32_t magic;
  uint32_t version;
  uint8_t secret[16];
  int32_t rank;
  int32_t nranks;
  PeerInfo info;
};

struct Reply {  // root -> rank; on code 0 followed by nranks PeerInfo
  uint32_t magic;
  int32_t code;  // 0 ok, else a StatusCode
  uint64_t nonce;
  char message[240];
};

struct RingHello {  // rank -> next rank
  uint32_t magic;
  uint32_t version;
  uint8_t secret[16];
  uint64_t nonce;
  int32_t rank;
  int32_t pad;
};

}  // namespace zcoll::wire
