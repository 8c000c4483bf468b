// bootstrap_wire.cpp - validation of received bootstrap messages (see bootstrap_wire.hpp).
#include "bootstrap/bootstrap_wire.hpp"

#include <netinet/in.h>

#include <algorithm>
#include <cstring>

namespace zcoll::wire {

namespace {

bool validAddress(const SockAddr& a) {
  if (a.family() == AF_INET) return a.len == sizeof(sockaddr_in) && a.port() != 0;
  if (a.family() == AF_INET6) return a.len == sizeof(sockaddr_in6) && a.port() != 0;
  return false;
}

bool sameSecret(const uint8_t (&bytes)[16], const Secret& secret) {
  Secret got;
  std::memcpy(got.data(), bytes, got.size());
  return secretsEqual(got, secret);
}

}  // namespace

Status checkPeerInfo(const PeerInfo& p, int expectedRank) {
  if (p.rank != expectedRank) return remoteError("peer entry names rank {} where rank {} was due", p.rank, expectedRank);
  if (Status s = checkListenAddress(p.listen, fmt::format("rank {}'s", p.rank)); !s) return s;
  if (std::memchr(p.hostname, 0, sizeof p.hostname) == nullptr)
    return remoteError("rank {}'s host name is not terminated", p.rank);
  if (p.pid <= 0) return remoteError("rank {}'s pid {} is not a process id", p.rank, p.pid);
  return Status::ok();
}

Status checkHello(const Hello& h, const Secret& secret) {
  if (h.magic != kHelloMagic || h.version != kVersion || !sameSecret(h.secret, secret))
    return invalidArgument("not a zcoll peer of this id (bad magic, version or secret)");
  if (h.nranks < 1 || h.nranks > kMaxRanks || h.rank < 0 || h.rank >= h.nranks)
    return invalidArgument("rank {} of {} is out of range", h.rank, h.nranks);
  return checkPeerInfo(h.info, h.rank);
}

Status checkReply(Reply* r, StatusCode* code) {
  if (r->magic != kReplyMagic) return remoteError("malformed reply (bad magic)");
  if (r->code < static_cast<int32_t>(StatusCode::Ok) || r->code > static_cast<int32_t>(StatusCode::Internal))
    return remoteError("malformed reply (status code {})", r->code);
  r->message[sizeof r->message - 1] = 0;
  *code = static_cast<StatusCode>(r->code);
  return Status::ok();
}

Status checkListenAddress(const SockAddr& a, std::string_view whose) {
  if (!validAddress(a))
    return remoteError("{} listening address is not a TCP/IP address (family {}, length {})", whose, a.family(), a.len);
  return Status::ok();
}

Status checkTreeHello(const TreeHello& h, const Secret& secret, uint64_t nonce, const std::vector<int>& children) {
  if (h.magic != kTreeMagic || h.version != kVersion || !sameSecret(h.secret, secret))
    return invalidArgument("not a zcoll peer of this id (bad magic, version or secret)");
  if (h.nonce != nonce) return invalidArgument("a peer of another communicator of this id (nonce)");
  if (std::find(children.begin(), children.end(), h.rank) == children.end())
    return invalidArgument("rank {} is not a child of this rank in the bootstrap tree", h.rank);
  return Status::ok();
}

}  // namespace zcoll::wire
