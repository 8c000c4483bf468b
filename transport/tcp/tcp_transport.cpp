// tcp_transport.cpp - see tcp_transport.hpp.
#include "transport/tcp/tcp_transport.hpp"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"
#include "kernels/host_copy.hpp"

namespace zcoll::tcp {
namespace {

constexpr size_t kBounceBytes = 64 * 1024;  // per connection: received bytes on their way to the slots
// A frame's payload with at least this much left to read goes straight into its slot.
constexpr size_t kDirectBytes = 16 * 1024;
constexpr uint64_t kHelloMagic = 0x7a636f6c74637032ull;  // "zcoltcp2"

struct Hello {
  uint64_t magic;
  uint64_t nonce;
  uint8_t secret[16];
  int32_t rank;
  int16_t stream;   // which of the connector's connections to this rank
  int16_t streams;  // its ZCOLL_SOCKETS_PER_PEER (must be this rank's)
  uint64_t chunk;   // its slot size (must be this rank's: frames and chunking follow it)
};

// v holds `bytes` zeroed (touched: no fault in a step) from the returned 64-byte boundary on.
uint8_t* lineAligned(std::vector<uint8_t>* v, size_t bytes) {
  v->assign(bytes + 64, 0);
  return v->data() + (64 - reinterpret_cast<uintptr_t>(v->data()) % 64) % 64;
}

// A connection to a peer in this host's network namespace runs over loopback: no link, no queue that
// pacing would protect. The host's default congestion control may pace (bbr, without an fq qdisc: a
// timer per packet), and where the CPU is the bottleneck its bandwidth estimate swings and whole runs
// slow down. Such connections use cubic where the kernel allows it.
constexpr char kLoopbackCongestion[] = "cubic";

Status configure(int fd, bool loopback, int rank) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return systemError("setsockopt(TCP_NODELAY)", errno);
  if (loopback &&
      ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, kLoopbackCongestion, sizeof kLoopbackCongestion - 1) != 0)
    ZCOLL_INFO(Init, rank, "tcp: keeping the default congestion control on a loopback connection ({}: {})",
               kLoopbackCongestion, std::strerror(errno));

  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return systemError("fcntl(O_NONBLOCK)", errno);
  return Status::ok();
}

}  // namespace

Status TcpTransport::create(const TransportArgs& args, std::unique_ptr<Transport>* out) {
  Bootstrap& boot = args.boot;
  const Config& config = args.config;
  const std::atomic<bool>* abort = args.abort;
  const std::vector<int>* members = args.members;
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  const int n = boot.nranks();
  t->rank_ = boot.rank();
  // Beside shm (members: a mixed communicator) the algorithms chunk by the smaller slot of the two:
  // larger tcp slots would go unused.
  const int64_t chunk = members ? std::min(config.socketChunkBytes, config.chunkBytes) : config.socketChunkBytes;
  t->chunk_ = std::max<size_t>(64, static_cast<size_t>(chunk) / 64 * 64);  // slots stay 64-byte aligned
  t->slots_ = config.fifoSlots;
  t->streams_ = config.socketsPerPeer;
  t->peers_.resize(static_cast<size_t>(n));
  std::vector<uint8_t> served(static_cast<size_t>(n), members ? 0 : 1);
  if (members)
    for (int r : *members) served[static_cast<size_t>(r)] = 1;
  served[static_cast<size_t>(t->rank_)] = 0;
  int lower = 0;  // served ranks below this one: they connect to it
  for (int r = 0; r < t->rank_; ++r) lower += served[static_cast<size_t>(r)];
  const Deadline deadline = Deadline::afterMs(config.timeoutMs);

  // Listen where the bootstrap reaches this rank (or on ZCOLL_SOCKET_IFNAME's address).
  SockAddr addr;
  if (!config.socketIfname.empty()) {
    if (Status s = interfaceAddress(config.socketIfname, &addr); !s) return s;
  } else {
    addr = boot.peers()[static_cast<size_t>(t->rank_)].listen;
  }
  addr.setPort(0);
  Fd listener;
  SockAddr bound;
  if (Status s = listenTcp(addr, n * t->streams_, &listener, &bound); !s) return std::move(s).withContext("tcp: listening socket");
  std::vector<SockAddr> all(static_cast<size_t>(n));
  all[static_cast<size_t>(t->rank_)] = bound;
  if (Status s = boot.allGather(all.data(), sizeof(SockAddr)); !s) return s;

  Hello hello{};
  hello.magic = kHelloMagic;
  hello.nonce = boot.nonce();
  std::memcpy(hello.secret, boot.secret().data(), sizeof hello.secret);
  hello.rank = t->rank_;
  hello.streams = static_cast<int16_t>(t->streams_);
  hello.chunk = t->chunk_;
  for (Peer& p : t->peers_) p.streams.resize(static_cast<size_t>(t->streams_));
  // Connect to the higher ranks (their listeners exist: the allGather came after them), K
  // connections each, then accept the lower ones'; each connection starts with its hello.
  for (int peer = t->rank_ + 1; peer < n; ++peer) {
    if (!served[static_cast<size_t>(peer)]) continue;
    for (int j = 0; j < t->streams_; ++j) {
      Fd fd;
      if (Status s = connectTcp(all[static_cast<size_t>(peer)], deadline, abort, &fd); !s)
        return std::move(s).withContext(fmt::format("tcp: connecting to rank {} at {}", peer, all[static_cast<size_t>(peer)].toString()));
      hello.stream = static_cast<int16_t>(j);
      if (Status s = sendAll(fd.get(), &hello, sizeof hello, deadline, abort); !s) return s;
      t->peers_[static_cast<size_t>(peer)].streams[static_cast<size_t>(j)].fd = std::move(fd);
    }
  }
  const HelloJudge judge = [&](const void* bytes, Fd* fd, const SockAddr& from) {
    Hello h{};
    std::memcpy(&h, bytes, sizeof h);
    if (h.magic != kHelloMagic || h.nonce != hello.nonce || std::memcmp(h.secret, hello.secret, sizeof h.secret) != 0 ||
        h.rank < 0 || h.rank >= t->rank_ || !served[static_cast<size_t>(h.rank)])
      return HelloJudgement{HelloVerdict::Drop, invalidArgument("not a peer of this communicator")};
    if (h.streams != t->streams_)
      return HelloJudgement{
          HelloVerdict::Fail,
          invalidUsage("tcp: rank {} opens {} connections per peer and rank {} {}: ZCOLL_SOCKETS_PER_PEER must be the "
                       "same on all ranks", h.rank, h.streams, t->rank_, t->streams_)};
    if (h.chunk != t->chunk_)
      return HelloJudgement{
          HelloVerdict::Fail,
          invalidUsage("tcp: rank {} uses {}-byte chunks and rank {} {}: ZCOLL_SOCKET_CHUNK_SIZE (or ZCOLL_CHUNK_SIZE, "
                       "which it follows when unset, and ZCOLL_TRANSPORTS: beside shm tcp takes the smaller of the "
                       "two) must give the same on all ranks", h.rank, h.chunk, t->rank_, t->chunk_)};
    if (h.stream < 0 || h.stream >= t->streams_ ||
        t->peers_[static_cast<size_t>(h.rank)].streams[static_cast<size_t>(h.stream)].fd.valid())
      return HelloJudgement{HelloVerdict::Drop, invalidArgument("a duplicate connection of rank {} (from {})", h.rank,
                                                                from.toString())};
    t->peers_[static_cast<size_t>(h.rank)].streams[static_cast<size_t>(h.stream)].fd = std::move(*fd);
    return HelloJudgement{HelloVerdict::Keep, Status::ok()};
  };
  if (Status s = acceptHellos(listener.get(), sizeof(Hello), lower * t->streams_, deadline, abort, judge,
                              fmt::format("tcp: rank {} waiting for the connections of lower ranks", t->rank_), t->rank_);
      !s)
    return s;

  if (Status s = t->sleeper_.init(); !s) return std::move(s).withContext("tcp");
  const uint64_t myHost = boot.peers()[static_cast<size_t>(t->rank_)].hostHash;
  for (int peer = 0; peer < n; ++peer) {
    Peer& p = t->peers_[static_cast<size_t>(peer)];
    if (!served[static_cast<size_t>(peer)]) continue;
    // Same host identity: the same network namespace, so the connection goes over loopback.
    const bool loopback = boot.peers()[static_cast<size_t>(peer)].hostHash == myHost;
    for (int j = 0; j < t->streams_; ++j) {
      Stream& st = p.streams[static_cast<size_t>(j)];
      st.sendFrame = st.recvFrame = static_cast<uint64_t>(j);
      st.bounceData = lineAligned(&st.bounce, kBounceBytes);
      if (Status s = configure(st.fd.get(), loopback, t->rank_); !s) return s;
      if (Status s = t->sleeper_.add(st.fd.get(), EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET); !s)
        return std::move(s).withContext("tcp");
    }
    // The slots 64-byte aligned, like the user buffers they are copied from and to (see FrameHeader).
    p.sendData = lineAligned(&p.send, static_cast<size_t>(t->slots_) * t->chunk_);
    p.sendHeaders.assign(static_cast<size_t>(t->slots_), FrameHeader{});
    p.sendFrom.assign(static_cast<size_t>(t->slots_), nullptr);
    p.recvData = lineAligned(&p.recv, static_cast<size_t>(t->slots_) * t->chunk_);
    p.recvBytes.assign(static_cast<size_t>(t->slots_), 0);
    p.arrived.assign(static_cast<size_t>(t->slots_), 0);
  }
  // Everyone is connected before anyone sends.
  if (Status s = boot.barrier(); !s) return s;
  *out = std::move(t);
  return Status::ok();
}

void TcpTransport::markDead(Peer& p) {
  if (!p.dead) {
    p.dead = true;
    if (p.sendDone < p.sendHead) --pendingPeers_;
  }
}

void TcpTransport::flushStream(Peer& p, Stream& st) {
  const uint64_t k = static_cast<uint64_t>(streams_);
  if ((st.noticeDue || st.noticeOffset != kFrameHeader) && !sendNotice(p, st)) return;
  while (st.sendFrame < p.sendHead && !p.dead) {
    // Up to 4 of this stream's pending frames in one sendmsg: each its header (kept apart, so that
    // the slots stay aligned for the reductions that write them) and its bytes; the first may be
    // half sent.
    iovec iov[8];
    int count = 0;
    for (uint64_t f = st.sendFrame; f < p.sendHead && count + 2 <= 8; f += k) {  // a frame takes <= 2 entries
      const size_t slot = static_cast<size_t>(f % static_cast<uint64_t>(slots_));
      const size_t skip = f == st.sendFrame ? st.sendOffset : 0;
      if (skip < kFrameHeader)
        iov[count++] = iovec{reinterpret_cast<uint8_t*>(&p.sendHeaders[slot]) + skip, kFrameHeader - skip};
      const uint8_t* from = p.sendFrom[slot];
      uint8_t* data = from ? const_cast<uint8_t*>(from) : p.sendData + slot * chunk_;
      const size_t into = skip > kFrameHeader ? skip - kFrameHeader : 0;
      iov[count++] = iovec{data + into, p.sendHeaders[slot].bytes - into};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t sent = ::sendmsg(st.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // EPOLLOUT will say when
      if (errno == EINTR) continue;
      markDead(p);
      return;
    }
    size_t left = static_cast<size_t>(sent);
    while (left > 0) {  // retire whole frames, then note how far into the next one it went
      const size_t slot = static_cast<size_t>(st.sendFrame % static_cast<uint64_t>(slots_));
      const size_t rest = kFrameHeader + p.sendHeaders[slot].bytes - st.sendOffset;
      if (left < rest) {
        st.sendOffset += left;
        break;
      }
      left -= rest;
      st.sendFrame += k;
      st.sendOffset = 0;
    }
  }
  if (st.noticeDue && !p.dead) sendNotice(p, st);
}

bool TcpTransport::sendNotice(Peer& p, Stream& st) {
  if (st.sendOffset != 0) return true;  // in mid-frame: after it
  for (;;) {
    if (st.noticeOffset == kFrameHeader) {
      if (!st.noticeDue) return true;
      st.notice = FrameHeader{};
      st.notice.bytes = kNoticeBytes;
      std::memcpy(st.notice.reserved, &waitingOn_, sizeof waitingOn_);
      st.notice.reserved[5] = kNoticeWaiting;
      st.noticeDue = false;
      st.noticeOffset = 0;
    }
    const ssize_t n = ::send(st.fd.get(), reinterpret_cast<uint8_t*>(&st.notice) + st.noticeOffset,
                             kFrameHeader - st.noticeOffset, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) markDead(p);
      return false;
    }
    st.noticeOffset += static_cast<size_t>(n);
  }
}

void TcpTransport::flush(Peer& p) {
  if (p.dead) return;
  uint64_t done = p.sendHead;
  for (Stream& st : p.streams) {
    flushStream(p, st);
    done = std::min(done, st.sendFrame);
  }
  if (p.dead) return;  // markDead settled pendingPeers_
  const bool wasPending = p.sendDone < p.sendHead;
  p.sendDone = done;
  if (wasPending && p.sendDone == p.sendHead) --pendingPeers_;
}

void TcpTransport::flushAll() {
  if (pendingPeers_ == 0) return;
  for (Peer& p : peers_)
    if (p.sendDone < p.sendHead && !p.dead) flush(p);
}

void TcpTransport::pullStream(Peer& p, Stream& st) {
  const uint64_t k = static_cast<uint64_t>(streams_);
  auto slotOf = [&] { return static_cast<size_t>(st.recvFrame % static_cast<uint64_t>(slots_)); };
  // After recvOffset advanced: a frame that is not ours drops the peer; a complete one is handed over.
  auto advanced = [&] {
    if (st.recvOffset >= kFrameHeader && st.header.bytes == kNoticeBytes) {
      int culprit = -1;
      std::memcpy(&culprit, st.header.reserved, sizeof culprit);
      if (st.header.reserved[5] == kNoticeWaiting) {  // not a frame: the stream goes on
        if (culprit >= -1 && culprit < static_cast<int>(peers_.size())) p.waitingOn = culprit;
        st.recvOffset = 0;
        return true;
      }
      // It failed and sends nothing more on this connection (frames on its others still count).
      if (culprit >= 0 && culprit < static_cast<int>(peers_.size())) {
        p.culprit = culprit;
        p.culpritStalled = st.header.reserved[4] != 0;
      }
      st.bounceHead = st.bounceTail;  // nothing follows a notice
      closeStream(p, st);
      return false;
    }
    if (st.recvOffset >= kFrameHeader && st.header.bytes > chunk_) {  // not our framing: the peer is gone
      ZCOLL_WARN(Coll, rank_, "tcp: a frame of {} bytes exceeds the {}-byte chunk: dropping the connection",
                 st.header.bytes, chunk_);
      markDead(p);
      return false;
    }
    if (st.recvOffset >= kFrameHeader && st.recvOffset == kFrameHeader + st.header.bytes) {  // complete
      p.recvBytes[slotOf()] = st.header.bytes;
      p.arrived[slotOf()] = 1;
      st.recvFrame += k;
      st.recvOffset = 0;
    }
    return true;
  };
  for (;;) {
    // Place what the bounce buffer holds: the frame's header, then its bytes into its slot (also
    // after the peer closed: they are frames it sent).
    while (st.bounceHead < st.bounceTail) {
      if (st.recvFrame - p.recvTail >= static_cast<uint64_t>(slots_)) return;  // no free slot: the rest waits
      const size_t avail = st.bounceTail - st.bounceHead;
      const uint8_t* from = st.bounceData + st.bounceHead;
      size_t n;
      if (st.recvOffset < kFrameHeader) {
        n = std::min(kFrameHeader - st.recvOffset, avail);
        std::memcpy(reinterpret_cast<uint8_t*>(&st.header) + st.recvOffset, from, n);
      } else {
        n = std::min(kFrameHeader + st.header.bytes - st.recvOffset, avail);
        copyBytes(p.recvData + slotOf() * chunk_ + (st.recvOffset - kFrameHeader), from, n);
      }
      st.recvOffset += n;
      st.bounceHead += n;
      if (!advanced()) return;
    }
    if (st.recvFrame - p.recvTail >= static_cast<uint64_t>(slots_) || p.dead || st.closed) return;
    // Inside a payload with much of it left: the kernel copies straight into the slot, at the
    // payload's offset within a cache line (kFrameHeader keeps it), without the bounce buffer's copy.
    uint8_t* into = st.bounceData;
    size_t want = kBounceBytes;
    const bool direct = st.recvOffset >= kFrameHeader && kFrameHeader + st.header.bytes - st.recvOffset >= kDirectBytes;
    if (direct) {
      into = p.recvData + slotOf() * chunk_ + (st.recvOffset - kFrameHeader);
      want = kFrameHeader + st.header.bytes - st.recvOffset;
    }
    const ssize_t got = ::recv(st.fd.get(), into, want, MSG_DONTWAIT);
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      markDead(p);
      return;
    }
    if (got == 0) {  // the peer closed this connection: whatever it sent on it is here
      closeStream(p, st);
      return;
    }
    if (direct) {
      st.recvOffset += static_cast<size_t>(got);
      if (!advanced()) return;
      continue;
    }
    st.bounceHead = 0;
    st.bounceTail = static_cast<size_t>(got);
  }
}

void TcpTransport::closeStream(Peer& p, Stream& st) {
  st.closed = true;
  // Frames may still wait on its other connections: the peer is gone once all are closed.
  if (std::all_of(p.streams.begin(), p.streams.end(), [](const Stream& s) { return s.closed; })) markDead(p);
}

bool TcpTransport::peerExited(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (!p.dead) pull(p);
  return p.dead;
}

void TcpTransport::announceFailure(int culprit, bool stalled) {
  FrameHeader h;
  h.bytes = kNoticeBytes;
  std::memcpy(h.reserved, &culprit, sizeof culprit);
  h.reserved[4] = stalled ? 1 : 0;
  for (Peer& p : peers_) {
    if (p.dead) continue;
    // On a connection between frames only (one in mid-frame would be misread); best effort: the
    // peer that misses it sees the connection close instead.
    for (Stream& st : p.streams)
      if (st.fd.valid() && st.sendOffset == 0 && st.noticeOffset == kFrameHeader) {
        [[maybe_unused]] const ssize_t n = ::send(st.fd.get(), &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
        break;
      }
  }
}

void TcpTransport::announceWaiting(int peer) {
  if (peer == waitingOn_) return;
  if (peer >= 0) ZCOLL_INFO(Coll, rank_, "tcp: half the timeout spent waiting on rank {}: telling the peers", peer);
  waitingOn_ = peer;
  for (Peer& p : peers_) {
    if (p.dead || p.streams.empty() || !p.streams[0].fd.valid()) continue;
    p.streams[0].noticeDue = true;
    sendNotice(p, p.streams[0]);
  }
}

Transport::Culprit TcpTransport::culpritOf(int peer) {
  // Its failure notice, else along its waiting notices to the first rank that waits on nobody (or
  // failed). Notices from a rank this one receives nothing from wait unread: pull them.
  int at = peer;
  for (size_t hops = 0; hops < peers_.size(); ++hops) {
    Peer& p = peers_[static_cast<size_t>(at)];
    if (!p.dead) pull(p);
    if (p.culprit >= 0) return {p.culprit, p.culpritStalled, at != peer};
    if (p.waitingOn < 0 || p.waitingOn == rank_ || p.waitingOn == peer) break;
    at = p.waitingOn;
  }
  if (at == peer) return {};
  return {at, true, true};
}

void TcpTransport::pull(Peer& p) {
  for (Stream& st : p.streams) pullStream(p, st);
  // Frames in order: what arrived on any stream counts once every earlier frame has.
  for (;;) {
    uint8_t& a = p.arrived[static_cast<size_t>(p.recvFilled % static_cast<uint64_t>(slots_))];
    if (p.recvFilled - p.recvTail >= static_cast<uint64_t>(slots_) || !a) break;
    a = 0;
    ++p.recvFilled;
  }
}

bool TcpTransport::tryAcquireSend(int peer, SendSlot* slot) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  flushAll();
  if (p.sendHead - p.sendDone >= static_cast<uint64_t>(slots_)) return false;
  slot->data = p.sendData + (p.sendHead % static_cast<uint64_t>(slots_)) * chunk_;
  slot->capacity = chunk_;
  return true;
}

void TcpTransport::commit(int peer, size_t bytes, const void* from) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  const size_t slot = static_cast<size_t>(p.sendHead % static_cast<uint64_t>(slots_));
  p.sendHeaders[slot].bytes = static_cast<uint32_t>(bytes);
  p.sendFrom[slot] = static_cast<const uint8_t*>(from);
  if (p.sendDone == p.sendHead && !p.dead) ++pendingPeers_;
  ++p.sendHead;
  flush(p);
}

bool TcpTransport::tryRecv(int peer, RecvChunk* chunk) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  flushAll();
  if (p.recvFilled == p.recvTail) pull(p);
  if (p.recvFilled == p.recvTail) return false;
  const size_t slot = static_cast<size_t>(p.recvTail % static_cast<uint64_t>(slots_));
  chunk->data = p.recvData + slot * chunk_;
  chunk->bytes = p.recvBytes[slot];
  return true;
}

void TcpTransport::releaseRecv(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  ++p.recvTail;
  pull(p);
}

}  // namespace zcoll::tcp
