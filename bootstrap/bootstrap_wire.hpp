// bootstrap_wire.hpp - the bootstrap's messages. Fixed-size, trivially copyable; a message that is
// not exactly one of these (magic, version, secret, sizes, field ranges) is dropped by the receiver.
// The check* functions are the only parsers of received bytes: pure, so they are fuzzed
// (tests/fuzz/bootstrap_wire_fuzz.cpp).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/unique_id.hpp"

namespace zcoll::wire {

inline constexpr uint32_t kHelloMagic = 0x7a42484cu;  // "zBHL"
inline constexpr uint32_t kReplyMagic = 0x7a425250u;  // "zBRP"
inline constexpr uint32_t kTreeMagic = 0x7a425452u;   // "zBTR"
// 2: PeerInfo::cpus; 3: PeerInfo::settings; 4: the creation watch; 5: the tree (Reply::parent, TreeHello)
inline constexpr uint32_t kVersion = 5;
inline constexpr int32_t kMaxRanks = 1 << 20;

struct Hello {  // rank -> root
  uint32_t magic;
  uint32_t version;
  uint8_t secret[16];
  int32_t rank;
  int32_t nranks;
  PeerInfo info;
};

// root -> rank. On code 0, rank 0's is followed by the nranks PeerInfo of the table, which goes down
// the tree (tree.hpp) from there; every other rank's names its tree parent's listening address.
struct Reply {
  uint32_t magic;
  int32_t code;  // 0 ok, else a StatusCode
  uint64_t nonce;
  SockAddr parent;
  char message[240];
};

// After a successful reply the root connection stays open until the rank's communicator is created:
// the rank sends kCreated then closes; a rank that closes without it left creation (it exited or
// failed), and the root sends every other rank a Notice naming it (only the first: the others failed
// because of it). A Notice of rank -1: the root stops watching (its timeout), nothing failed.
inline constexpr uint8_t kCreated = 'C';
inline constexpr uint32_t kNoticeMagic = 0x7a424e54u;  // "zBNT"
struct Notice {  // root -> rank
  uint32_t magic;
  int32_t rank;
  char message[240];
};

struct TreeHello {  // rank -> its tree parent
  uint32_t magic;
  uint32_t version;
  uint8_t secret[16];
  uint64_t nonce;
  int32_t rank;
  int32_t pad;
};

// A peer's self-description, as received: rank as expected, a TCP/IP listening address, a
// NUL-terminated host name.
Status checkPeerInfo(const PeerInfo& p, int expectedRank);
// A rank's hello at the rendezvous root: the id's secret, a rank inside nranks <= kMaxRanks, and its
// own valid PeerInfo.
Status checkHello(const Hello& h, const Secret& secret);
// The root's reply header: on success *code is what the root reports (Success or a StatusCode) and
// message is NUL-terminated.
Status checkReply(Reply* r, StatusCode* code);
// A TCP/IP address with a port (a rank's listening address).
Status checkListenAddress(const SockAddr& a, std::string_view whose);
// A tree child's hello: secret, this communicator's nonce and a rank among `children`.
Status checkTreeHello(const TreeHello& h, const Secret& secret, uint64_t nonce, const std::vector<int>& children);

}  // namespace zcoll::wire
