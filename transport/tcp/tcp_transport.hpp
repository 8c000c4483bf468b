// tcp_transport.hpp - the TCP transport: every peer over K non-blocking TCP connections
// (ZCOLL_SOCKETS_PER_PEER, default 1).
//
// The slot model of transport.hpp over a byte stream: per peer, a ring of `slots` send slots and
// one of `slots` receive slots, chunkCapacity() bytes each (ZCOLL_SOCKET_CHUNK_SIZE, default 512K:
// a frame costs a pass through the kernel's stack whatever its size; beside shm the smaller of the
// two chunk sizes; checked equal at connection). A committed send slot goes out
// as one frame (a 64-byte header holding its length, then the bytes; commitSendFrom: the bytes
// straight from caller memory, without the copy into the slot) as far as the socket takes it; what
// is left goes out on the next call into the transport (any call progresses every peer's pending
// sends, so that a rank waiting to receive never holds back what another waits for), and an
// operation ends only once all of its frames are in the kernel's hands (idle()). Headers and short
// pieces are received through a 64 KiB bounce buffer per connection (one recv takes the end of a
// frame and the start of the next) and copied into the receive slots; the rest of a long payload is
// received straight into its slot. With K connections, frame f travels on connection f mod K (each
// connection stays in order; frames complete out of order across connections and are handed to the
// algorithm in order), so that several flows share a fast link's work (the receiving NIC spreads
// flows over its queues and cores, each flow has its own congestion window). Waiting sleeps in
// epoll (edge-triggered, every socket plus an eventfd for wake()).
// Connections and slots are made on a peer's first use, as NCCL connects only the peers its ring
// and tree use: creation only exchanges the listening addresses, so a rank's descriptors and memory
// follow the peers it talks to, not N. A pair's connections are always made by its lower rank (no
// race between two); the higher one, needing the pair first, asks for them with a probe (a hello
// flagged kProbe on a connection of its own, closed after; a refused probe: the peer is gone).
// Slots live in one reservation of address space, a stretch per peer, touched only when used and
// given back (madvise) for the peers idle longest beyond ZCOLL_SOCKET_MEMORY. Connections are
// authenticated with the communicator's secret and nonce, TCP_NODELAY (and cubic on loopback: see
// configure()); their interface is ZCOLL_SOCKET_IFNAME's, or the bootstrap's.
#pragma once

#include <sys/mman.h>

#include <atomic>
#include <memory>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "core/socket.hpp"
#include "transport/epoll_sleeper.hpp"
#include "transport/transport.hpp"

namespace zcoll::tcp {

// A frame's header: its payload length, padded to a cache line, so that payloads of whole cache
// lines (every chunk of a large operation) start at the same offset within a line in the slot, in
// the byte stream and in the bounce buffer (the copies between them are line-aligned).
inline constexpr size_t kFrameHeader = 64;
struct alignas(64) FrameHeader {
  uint32_t bytes = 0;
  uint8_t reserved[kFrameHeader - 4] = {};
};
static_assert(sizeof(FrameHeader) == kFrameHeader);
// A header of this length is a notice, not a frame: reserved[0..3] holds a rank. reserved[5] says which:
// kNoticeFailed, the sender's communicator failed because of that rank (reserved[4]: 1 if it stalled)
// and it sends nothing more; kNoticeWaiting, the sender has waited long on that rank (-1: no more).
inline constexpr uint32_t kNoticeBytes = 0xffffffffu;
inline constexpr uint8_t kNoticeFailed = 0, kNoticeWaiting = 1;

// Gives back a reservation of address space (TcpTransport's slots).
struct Unmap {
  size_t bytes = 0;
  void operator()(uint8_t* p) const { ::munmap(p, bytes); }
};

class TcpTransport final : public Transport {
 public:
  // Collective over the bootstrap. With `args.members`, only those ranks are connected (the ranks on other
  // hosts, in a mixed communicator); else every rank.
  static Status create(const TransportArgs& args, std::unique_ptr<Transport>* out);
  ~TcpTransport() override = default;

  std::string_view name() const override { return "tcp"; }
  size_t chunkCapacity() const override { return chunk_; }
  int slotsPerPeer() const override { return slots_; }

  bool tryAcquireSend(int peer, SendSlot* slot) override;
  void commitSend(int peer, size_t bytes) override { commit(peer, bytes, nullptr); }
  // Any memory: the kernel copies it when the socket takes the frame (idle() waits for that).
  bool commitSendFrom(int peer, const void* src, size_t bytes) override {
    commit(peer, bytes, src);
    return true;
  }
  bool tryRecv(int peer, RecvChunk* chunk) override;
  void releaseRecv(int peer) override;

  uint32_t prepareSleep() override { return 0; }
  void cancelSleep() override {}
  // After a sleep, the connections and requests that came in meanwhile (a rank that needs none of
  // its pending peers would otherwise leave higher ranks' requests at the listener).
  void sleep(uint32_t, int64_t maxNs) override {
    sleeper_.sleep(maxNs);
    acceptAll();
  }
  void wake() override { sleeper_.wake(); }
  int pollFd() const override { return sleeper_.fd(); }
  // Reads what the peer sent first (a failure notice marks it dead): waits that sleep ask this.
  bool peerExited(int peer) override;
  void announceFailure(int culprit, bool stalled) override;
  void announceWaiting(int peer) override;
  Culprit culpritOf(int peer) override;
  void progress() override { flushAll(); }
  bool idle() override {
    flushAll();
    return pendingPeers_ == 0;
  }
  // The whole reservation (registered for device copies: every peer's slots, kept from then on).
  void forEachSlotRegion(const std::function<void(void*, size_t)>& fn) override;

 private:
  // One connection of a peer: it carries frames j, j + K, j + 2K, ... (K = streams per peer), so
  // each stream is in order and frame f is always on stream f mod K.
  struct Stream {
    Fd fd;
    uint64_t sendFrame = 0;  // next frame to hand over on this stream
    size_t sendOffset = 0;   // bytes of it handed over, its header included
    uint64_t recvFrame = 0;  // next frame to receive on this stream
    size_t recvOffset = 0;   // bytes of it read, its header included
    FrameHeader header;
    // Received bytes not yet placed: frame headers and short payload pieces, read in pieces of up to
    // kBounceBytes into this cache-resident buffer (64-byte aligned: bounceData), then copied into
    // the slots; the rest of a long payload is read straight into its slot.
    uint8_t* bounceData = nullptr;  // in the peer's stretch of the reservation
    size_t bounceHead = 0, bounceTail = 0;
    bool closed = false;  // EOF or a failure notice: everything the peer sent on it has been read
    // Waiting notices go on each peer's first stream, between frames: noticeDue when waitingOn_
    // changed since the last one, noticeOffset bytes of `notice` sent (kFrameHeader: none in flight).
    bool noticeDue = false;
    size_t noticeOffset = kFrameHeader;
    FrameHeader notice;
  };
  struct Peer {
    int index = 0;                // its rank
    std::vector<Stream> streams;  // made on first use (started)
    bool started = false;  // state and slots set up; its connections made (lower rank) or asked for
    bool up = false;       // every stream connected
    bool resident = false;  // its stretch of the reservation may hold pages (counted in residentPeers_)
    uint64_t lastUse = 0;   // useClock_ at its last tryAcquireSend/tryRecv (which stretch goes first)
    int64_t probedNs = 0;   // when this (higher) rank last asked it for the connections
    bool dead = false;
    int culprit = -1;  // its failure notice: the rank it blamed, and whether that one stalled
    bool culpritStalled = false;
    int waitingOn = -1;  // its last waiting notice
    // Send ring: slot i at sendData + i * chunk (sendData: send's first 64-byte boundary), its header
    // (length) in sendHeaders[i] (sent first).
    uint8_t* sendData = nullptr;
    std::vector<FrameHeader> sendHeaders;
    std::vector<const uint8_t*> sendFrom;  // per slot: caller memory sent instead of the slot, or nullptr
    uint64_t sendHead = 0;  // frames committed
    uint64_t sendDone = 0;  // frames below this are all handed to their sockets
    // Receive ring: slot i at recvData + i * chunk; its length in recvBytes[i]; arrived[i] while frame
    // of slot i is complete but an earlier one (on another stream) is not.
    uint8_t* recvData = nullptr;
    std::vector<uint32_t> recvBytes;
    std::vector<uint8_t> arrived;
    uint64_t recvTail = 0;   // frames released
    uint64_t recvFilled = 0; // frames below this are all complete
  };

  // A connection accepted whose hello has not all arrived.
  struct Accepting {
    Fd fd;
    SockAddr from;
    uint8_t hello[64];
    size_t got = 0;
    int64_t startNs = 0;
  };

  TcpTransport() = default;
  // The slow path of a peer not yet up: sets it up on first use, then connects (lower rank) or asks
  // for its connections (higher rank), and adopts what arrived. Returns whether it is up.
  bool connect(int peer);
  void start(int peer);
  Status dial(int peer, int stream, bool probe, Fd* out);
  void acceptAll();      // takes every connection waiting at the listener, and their hellos
  void adopt(Accepting& a);  // a complete hello: keeps the connection, answers a probe, or drops it
  void makeResident(Peer& p);  // before its stretch is touched: gives back the idlest beyond the budget
  bool quiet(const Peer& p) const;  // nothing of it in its stretch: no frame to send, receive or hand over
  void commit(int peer, size_t bytes, const void* from);  // from: caller memory, or nullptr (the slot)
  void flush(Peer& p);       // hands pending frames to their sockets until they are full
  void flushAll();
  void pull(Peer& p);        // reads frames into free receive slots until none is free or no data
  void flushStream(Peer& p, Stream& st);
  bool sendNotice(Peer& p, Stream& st);  // false while st's waiting notice is half sent
  void tellWaiting(Peer& p);  // a new connection gets this rank's current waiting notice
  void pullStream(Peer& p, Stream& st);
  void markDead(Peer& p);
  void closeStream(Peer& p, Stream& st);  // EOF or a failure notice on st: dead once all are closed

  size_t chunk_ = 0;
  int slots_ = 0;
  Fd listener_;
  std::vector<SockAddr> addrs_;    // every rank's listening address (creation's all-gather)
  std::vector<uint8_t> served_;    // the ranks this transport connects
  std::vector<uint8_t> loopback_;  // per rank: the same network namespace as this one
  std::vector<Accepting> accepting_;
  uint64_t nonce_ = 0;
  uint8_t secret_[16] = {};
  int64_t timeoutMs_ = 0;
  const std::atomic<bool>* abort_ = nullptr;
  // Slot memory: one reservation, peerStride_ bytes per rank (send ring, receive ring, bounce buffers).
  std::unique_ptr<uint8_t, Unmap> region_;
  size_t peerStride_ = 0;
  size_t residentPeers_ = 0, budgetPeers_ = 0;  // stretches that may hold pages; the most kept
  bool pinned_ = false;  // registered for device copies: nothing is given back
  bool evicted_ = false;  // said once
  uint64_t useClock_ = 0;
  int streams_ = 1;  // connections per peer (ZCOLL_SOCKETS_PER_PEER)
  int rank_ = 0;
  int waitingOn_ = -1;  // the last announceWaiting
  std::vector<Peer> peers_;
  int pendingPeers_ = 0;  // peers with frames not yet handed over (flushAll's fast path)
  EpollSleeper sleeper_;  // every socket, edge-triggered
};

}  // namespace zcoll::tcp
