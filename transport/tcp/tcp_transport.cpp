// tcp_transport.cpp - see tcp_transport.hpp.
#include "transport/tcp/tcp_transport.hpp"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/clock.hpp"
#include "core/log.hpp"
#include "kernels/host_copy.hpp"

namespace zcoll::tcp {
namespace {

constexpr size_t kBounceBytes = 64 * 1024;  // per connection: received bytes on their way to the slots
// A frame's payload with at least this much left to read goes straight into its slot.
constexpr size_t kDirectBytes = 16 * 1024;
constexpr uint64_t kHelloMagic = 0x7a636f6c74637033ull;  // "zcoltcp3"

struct Hello {
  uint64_t magic;
  uint64_t nonce;
  uint8_t secret[16];
  int32_t rank;
  int16_t stream;   // which of the connector's connections to this rank
  int16_t streams;  // its ZCOLL_SOCKETS_PER_PEER (must be this rank's)
  uint64_t chunk;   // its slot size (must be this rank's: frames and chunking follow it)
  uint32_t flags;   // kProbe: not a connection, a request for the pair's connections
  uint32_t pad;
};
constexpr uint32_t kProbe = 1;
static_assert(sizeof(Hello) <= 64);

constexpr int64_t kDialMs = 10'000;       // a peer's listener exists: what does not answer by then is gone
constexpr int64_t kProbeEveryNs = 1'000'000'000;  // a higher rank repeats its request this often
constexpr int64_t kHelloBudgetNs = 5'000'000'000;  // a connection that sends no hello in this time is dropped
constexpr size_t kMaxAccepting = 1024;
// Following a chain of waits to a rank not yet connected: how long it may take to answer.
constexpr int64_t kChainAnswerNs = 500'000'000, kChainPollNs = 10'000'000;

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
  std::unique_ptr<TcpTransport> t(new TcpTransport());
  t->timeoutMs_ = args.config.timeoutMs;
  t->abort_ = args.abort;  // dials on first use stop with the communicator
  Bootstrap& boot = args.boot;
  const Config& config = args.config;
  const std::vector<int>* members = args.members;
  const int n = boot.nranks();
  t->rank_ = boot.rank();
  // Beside shm (members: a mixed communicator) the algorithms chunk by the smaller slot of the two:
  // larger tcp slots would go unused.
  const int64_t chunk = members ? std::min(config.socketChunkBytes, config.chunkBytes) : config.socketChunkBytes;
  t->chunk_ = std::max<size_t>(64, static_cast<size_t>(chunk) / 64 * 64);  // slots stay 64-byte aligned
  t->slots_ = config.fifoSlots;
  t->streams_ = config.socketsPerPeer;
  t->served_.assign(static_cast<size_t>(n), members ? 0 : 1);
  if (members)
    for (int r : *members) t->served_[static_cast<size_t>(r)] = 1;
  t->served_[static_cast<size_t>(t->rank_)] = 0;

  // Listen where the bootstrap reaches this rank (or on ZCOLL_SOCKET_IFNAME's address).
  SockAddr addr;
  if (!config.socketIfname.empty()) {
    if (Status s = interfaceAddress(config.socketIfname, &addr); !s) return s;
  } else {
    addr = boot.peers()[static_cast<size_t>(t->rank_)].listen;
  }
  addr.setPort(0);
  SockAddr bound;
  // Connections and requests wait at the listener until this rank needs their peer: a backlog of
  // N would overflow (a higher rank asks again every second), and a dropped SYN reads as a gone peer.
  if (Status s = listenTcp(addr, 4096, &t->listener_, &bound); !s)
    return std::move(s).withContext("tcp: listening socket");
  t->addrs_.resize(static_cast<size_t>(n));
  t->addrs_[static_cast<size_t>(t->rank_)] = bound;
  // Every listener exists once this returns anywhere: a peer's first use may connect to it.
  if (Status s = boot.allGather(t->addrs_.data(), sizeof(SockAddr)); !s) return s;
  t->nonce_ = boot.nonce();
  std::memcpy(t->secret_, boot.secret().data(), sizeof t->secret_);
  const uint64_t myHost = boot.peers()[static_cast<size_t>(t->rank_)].hostHash;
  t->loopback_.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) t->loopback_[static_cast<size_t>(r)] = boot.peers()[static_cast<size_t>(r)].hostHash == myHost;

  if (Status s = t->sleeper_.init(); !s) return std::move(s).withContext("tcp");
  if (Status s = t->sleeper_.add(t->listener_.get(), EPOLLIN | EPOLLET); !s) return std::move(s).withContext("tcp");
  // The slots: address space for every peer, pages only for the peers used.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t stride = 2 * static_cast<size_t>(t->slots_) * t->chunk_ + static_cast<size_t>(t->streams_) * kBounceBytes;
  t->peerStride_ = (stride + page - 1) / page * page;
  const size_t reserved = t->peerStride_ * static_cast<size_t>(n);
  void* region = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED)
    return systemError(fmt::format("tcp: reserving {} bytes of address space for the slots of {} peers", reserved, n),
                       errno);
  t->region_ = std::unique_ptr<uint8_t, Unmap>(static_cast<uint8_t*>(region), Unmap{reserved});
  t->budgetPeers_ = std::max<size_t>(1, static_cast<size_t>(config.socketMemoryBytes) / t->peerStride_);
  t->peers_.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) t->peers_[static_cast<size_t>(r)].index = r;
  *out = std::move(t);
  return Status::ok();
}

void TcpTransport::forEachSlotRegion(const std::function<void(void*, size_t)>& fn) {
  pinned_ = true;  // registered memory stays: nothing is given back from now on
  for (size_t r = 0; r < peers_.size(); ++r)
    if (served_[r]) fn(region_.get() + r * peerStride_, peerStride_);
}

void TcpTransport::start(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  p.started = true;
  p.streams.resize(static_cast<size_t>(streams_));
  uint8_t* base = region_.get() + static_cast<size_t>(peer) * peerStride_;
  p.sendData = base;
  p.recvData = base + static_cast<size_t>(slots_) * chunk_;
  p.sendHeaders.assign(static_cast<size_t>(slots_), FrameHeader{});
  p.sendFrom.assign(static_cast<size_t>(slots_), nullptr);
  p.recvBytes.assign(static_cast<size_t>(slots_), 0);
  p.arrived.assign(static_cast<size_t>(slots_), 0);
  for (int j = 0; j < streams_; ++j) {
    Stream& st = p.streams[static_cast<size_t>(j)];
    st.sendFrame = st.recvFrame = static_cast<uint64_t>(j);
    st.bounceData = base + 2 * static_cast<size_t>(slots_) * chunk_ + static_cast<size_t>(j) * kBounceBytes;
  }
  if (rank_ > peer) return;  // the lower rank makes the connections
  for (int j = 0; j < streams_; ++j) {
    Stream& st = p.streams[static_cast<size_t>(j)];
    Status s = dial(peer, j, false, &st.fd);
    if (s) s = configure(st.fd.get(), loopback_[static_cast<size_t>(peer)], rank_);
    if (s) s = sleeper_.add(st.fd.get(), EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
    if (!s) {
      ZCOLL_WARN(Coll, rank_, "tcp: connecting to rank {} at {}: {}", peer, addrs_[static_cast<size_t>(peer)].toString(),
                 s.message());
      st.fd.reset();
      markDead(p);
      return;
    }
  }
  p.up = true;
  tellWaiting(p);
}

Status TcpTransport::dial(int peer, int stream, bool probe, Fd* out) {
  const Deadline deadline = Deadline::afterMs(std::min(timeoutMs_, kDialMs));
  if (Status s = connectTcp(addrs_[static_cast<size_t>(peer)], deadline, abort_, out); !s) return s;
  Hello h{};
  h.magic = kHelloMagic;
  h.nonce = nonce_;
  std::memcpy(h.secret, secret_, sizeof h.secret);
  h.rank = rank_;
  h.stream = static_cast<int16_t>(stream);
  h.streams = static_cast<int16_t>(streams_);
  h.chunk = chunk_;
  h.flags = probe ? kProbe : 0;
  return sendAll(out->get(), &h, sizeof h, deadline, abort_);
}

bool TcpTransport::connect(int peer) {
  Peer& p = peers_[static_cast<size_t>(peer)];
  if (p.dead) return false;
  if (!p.started) start(peer);
  if (p.up || p.dead) return p.up;
  // The higher rank of the pair takes the connections that came, else asks for them (and learns
  // that the peer is gone when it refuses - unless they came meanwhile: a peer done with its part may
  // have closed its listener after its connections with their frames arrived).
  acceptAll();
  const int64_t now = nowNs();
  if (!p.up && (p.probedNs == 0 || now - p.probedNs > kProbeEveryNs)) {
    p.probedNs = now;
    Fd probe;
    if (Status s = dial(peer, 0, true, &probe); !s) {
      acceptAll();
      if (p.up) return true;
      ZCOLL_WARN(Coll, rank_, "tcp: asking rank {} at {} for its connections: {}", peer,
                 addrs_[static_cast<size_t>(peer)].toString(), s.message());
      markDead(p);
      return false;
    }
  }
  return p.up;
}

void TcpTransport::acceptAll() {
  for (;;) {
    Accepting a;
    a.from.len = sizeof a.from.storage;
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&a.from.storage), &a.from.len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;  // EAGAIN; or out of descriptors: the connection waits at the listener (its peer times out)
    }
    a.fd.reset(fd);
    a.startNs = nowNs();
    if (accepting_.size() >= kMaxAccepting) accepting_.erase(accepting_.begin());
    accepting_.push_back(std::move(a));
  }
  const int64_t now = nowNs();
  for (size_t i = 0; i < accepting_.size();) {
    Accepting& a = accepting_[i];
    ssize_t n = 1;
    while (a.got < sizeof(Hello) && (n = ::recv(a.fd.get(), a.hello + a.got, sizeof(Hello) - a.got, MSG_DONTWAIT)) > 0)
      a.got += static_cast<size_t>(n);
    if (a.got == sizeof(Hello)) {
      adopt(a);
    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      ZCOLL_WARN(Coll, rank_, "tcp: dropped a connection from {}: closed after {} bytes of its hello", a.from.toString(),
                 a.got);
    } else if (now - a.startNs > kHelloBudgetNs) {
      ZCOLL_WARN(Coll, rank_, "tcp: dropped a connection from {}: no hello within {} ms", a.from.toString(),
                 kHelloBudgetNs / 1'000'000);
    } else {
      ++i;
      continue;
    }
    accepting_.erase(accepting_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void TcpTransport::adopt(Accepting& a) {
  Hello h{};
  std::memcpy(&h, a.hello, sizeof h);
  const int n = static_cast<int>(peers_.size());
  if (h.magic != kHelloMagic || h.nonce != nonce_ || std::memcmp(h.secret, secret_, sizeof h.secret) != 0 || h.rank < 0 ||
      h.rank >= n || !served_[static_cast<size_t>(h.rank)]) {
    ZCOLL_WARN(Coll, rank_, "tcp: dropped a connection from {}: not a peer of this communicator", a.from.toString());
    return;
  }
  Peer& p = peers_[static_cast<size_t>(h.rank)];
  if (h.streams != streams_ || h.chunk != chunk_) {  // the settings hash makes this rare: say it, fail the peer
    ZCOLL_WARN(Coll, rank_,
                "tcp: rank {} opens {} connections per peer in {}-byte chunks and rank {} {} in {}: "
                "ZCOLL_SOCKETS_PER_PEER and ZCOLL_SOCKET_CHUNK_SIZE must be the same on all ranks",
                h.rank, h.streams, h.chunk, rank_, streams_, chunk_);
    markDead(p);
    return;
  }
  if (h.flags & kProbe) {  // a higher rank asks for the pair's connections
    if (h.rank > rank_ && !p.started) start(h.rank);
    return;
  }
  if (h.rank > rank_ || h.stream < 0 || h.stream >= streams_) {
    ZCOLL_WARN(Coll, rank_, "tcp: dropped a connection of rank {} from {}: not one this rank expects", h.rank,
               a.from.toString());
    return;
  }
  if (!p.started) start(h.rank);
  Stream& st = p.streams[static_cast<size_t>(h.stream)];
  if (st.fd.valid() || p.dead) {
    ZCOLL_WARN(Coll, rank_, "tcp: dropped a duplicate connection of rank {} from {}", h.rank, a.from.toString());
    return;
  }
  Status s = configure(a.fd.get(), loopback_[static_cast<size_t>(h.rank)], rank_);
  if (s) s = sleeper_.add(a.fd.get(), EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
  if (!s) {
    ZCOLL_WARN(Coll, rank_, "tcp: the connection of rank {}: {}", h.rank, s.message());
    markDead(p);
    return;
  }
  st.fd = std::move(a.fd);
  p.up = std::all_of(p.streams.begin(), p.streams.end(), [](const Stream& x) { return x.fd.valid(); });
  if (p.up) tellWaiting(p);
}

bool TcpTransport::quiet(const Peer& p) const {
  if (p.sendDone != p.sendHead || p.recvFilled != p.recvTail) return false;
  for (uint8_t a : p.arrived)
    if (a) return false;
  for (const Stream& st : p.streams)
    if (st.recvOffset != 0 || st.bounceHead != st.bounceTail) return false;
  return true;
}

void TcpTransport::makeResident(Peer& p) {
  if (!pinned_ && residentPeers_ >= budgetPeers_) {
    Peer* idlest = nullptr;
    for (Peer& q : peers_)
      if (q.resident && &q != &p && quiet(q) && (!idlest || q.lastUse < idlest->lastUse)) idlest = &q;
    if (idlest) {
      if (!evicted_)
        ZCOLL_INFO(Coll, rank_, "tcp: the slots of {} peers fill ZCOLL_SOCKET_MEMORY ({} bytes each): giving back those "
                   "of the peers idle longest", residentPeers_, peerStride_);
      evicted_ = true;
      ::madvise(region_.get() + static_cast<size_t>(idlest->index) * peerStride_, peerStride_, MADV_DONTNEED);
      idlest->resident = false;
      --residentPeers_;
    }
  }
  p.resident = true;
  ++residentPeers_;
}

void TcpTransport::markDead(Peer& p) {
  if (!p.dead) {
    p.dead = true;
    if (p.sendDone < p.sendHead) --pendingPeers_;
  }
}

void TcpTransport::flushStream(Peer& p, Stream& st) {
  const uint64_t k = static_cast<uint64_t>(streams_);
  if (!st.fd.valid()) return;  // not connected yet
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
  if (p.dead || (!p.up && !connect(p.index))) return;
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
    if (st.recvFrame - p.recvTail >= static_cast<uint64_t>(slots_) || p.dead || st.closed || !st.fd.valid()) return;
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
  if (!p.up) connect(peer);  // a gone peer refuses the connection or the request for it
  if (p.up && !p.dead) pull(p);
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

void TcpTransport::tellWaiting(Peer& p) {
  if (waitingOn_ < 0 || p.streams.empty() || !p.streams[0].fd.valid()) return;
  p.streams[0].noticeDue = true;
  sendNotice(p, p.streams[0]);
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
  bool unanswered = false;  // the chain's end is a rank this one asked and that said nothing
  for (size_t hops = 0; hops < peers_.size(); ++hops) {
    Peer& p = peers_[static_cast<size_t>(at)];
    unanswered = false;
    if (!p.up && !p.dead && at != peer) {
      // A rank of the chain this one never talked to: connect (its current waiting notice comes with
      // a new connection) and give it a moment to answer.
      const int64_t until = nowNs() + kChainAnswerNs;
      while (!connect(at) && !p.dead && nowNs() < until) sleeper_.sleep(kChainPollNs);
      while (p.up && !p.dead && p.waitingOn < 0 && p.culprit < 0 && nowNs() < until) {
        pull(p);
        if (p.waitingOn < 0 && p.culprit < 0) sleeper_.sleep(kChainPollNs);
      }
      unanswered = p.waitingOn < 0 && p.culprit < 0;
    }
    if (p.up && !p.dead) pull(p);
    if (p.culprit >= 0) return {p.culprit, p.culpritStalled, at != peer};
    if (p.waitingOn < 0 || p.waitingOn == rank_ || p.waitingOn == peer) break;
    at = p.waitingOn;
  }
  if (at == peer) return {};
  if (peers_[static_cast<size_t>(at)].dead || unanswered) {
    // The chain's end is gone, or asked and silent (it may be past its own wait, failing or exiting):
    // `peer`, which waits on it, fails in turn and says whom it blames - after following its own chain,
    // which may take it one answer's time. Give it two.
    Peer& first = peers_[static_cast<size_t>(peer)];
    const int64_t until = nowNs() + 2 * kChainAnswerNs;
    while (first.culprit < 0 && !first.dead && nowNs() < until) {
      pull(first);
      if (first.culprit < 0) sleeper_.sleep(kChainPollNs);
    }
    if (first.culprit >= 0) return {first.culprit, first.culpritStalled, true};
  }
  return {at, true, true};
}

void TcpTransport::pull(Peer& p) {
  if (!p.resident) makeResident(p);
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
  if (!p.up) connect(peer);  // its slots exist from here on; frames wait for the connection
  flushAll();
  if (p.sendHead - p.sendDone >= static_cast<uint64_t>(slots_) || !p.started) return false;
  p.lastUse = ++useClock_;
  if (!p.resident) makeResident(p);
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
  const bool up = p.up || connect(peer);
  flushAll();  // every call moves every peer's pending frames, also one that finds this peer unconnected
  if (!up) return false;
  p.lastUse = ++useClock_;
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
