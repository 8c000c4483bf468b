// ib_transport.hpp - the InfiniBand/RoCE transport: libibverbs directly, one RC queue pair per peer.
//
// The slot model of transport.hpp over RDMA writes. Per peer, `slots` send slots and `slots` receive
// slots of chunkCapacity() bytes, all in one memory region registered once at creation (the slots
// are the only memory the NIC touches: no per-call registration). A committed send slot k goes out
// as one RDMA WRITE WITH IMMEDIATE straight into the peer's receive slot k (the immediate is the
// byte count); the receiver sees it as a receive completion, in order (RC). releaseRecv() gives the
// slot back with a credit: a zero-byte WRITE WITH IMMEDIATE whose immediate has the credit bit.
// Zero copy (commitSendFrom): a chunk from memory the caller registered (zcollCommRegister, kept in
// an MR cache: mr_cache.hpp) is written from there, not from the send slot. A
// sender may run `slots` chunks ahead of the credits it has. One completion queue per communicator,
// polled by every call (no syscall); sleeping arms it (ibv_req_notify_cq) and waits on its
// completion channel's fd beside an eventfd for wake(). A failed work completion (retries exhausted:
// the peer's process or link is gone) marks the peer dead.
//
// Device, port and GID: ZCOLL_IB_HCA ("name[:port]", comma-separated, first usable; default: the
// first device with an active port), ZCOLL_IB_GID_INDEX (RoCE; default: the first RoCE v2 GID that
// holds an IPv4 address, else the first RoCE v2 GID, else 0). InfiniBand ports are addressed by LID.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "transport/epoll_sleeper.hpp"
#include "transport/ib/mr_cache.hpp"
#include "transport/peer_watch.hpp"
#include "transport/transport.hpp"

namespace zcoll::ib {

// Which HCA port and GID a rank uses.
struct PortChoice {
  std::string device;
  int port = 0;
  int gidIndex = -1;      // -1: no GID (InfiniBand link layer)
  bool ethernet = false;  // RoCE
};

// One line per RDMA device and port of this host ("rxe0 port 1: active, RoCE, mtu 1024"), or why
// there is none (for zcoll-info).
std::vector<std::string> describeDevices();

class IbTransport final : public Transport {
 public:
  // Collective over the bootstrap. Every rank says whether it has a usable RDMA port; when one has
  // none, either all fail naming it (`args.lastChoice`: ZCOLL_TRANSPORTS names ib last) or all return OK with
  // *out left empty (automatic choice: the next transport is tried).
  // With `args.members`, only those ranks get a queue pair and slots (a mixed communicator's other hosts).
  static Status create(const TransportArgs& args, std::unique_ptr<Transport>* out);
  ~IbTransport() override;

  std::string_view name() const override { return "ib"; }
  size_t chunkCapacity() const override { return chunk_; }
  int slotsPerPeer() const override { return slots_; }

  bool tryAcquireSend(int peer, SendSlot* slot) override;
  void commitSend(int peer, size_t bytes) override;
  // Zero copy: from memory registered by registerMemory, the RDMA write reads the caller's buffer
  // itself into the peer's receive slot; idle() is false until every such write has completed.
  bool commitSendFrom(int peer, const void* src, size_t bytes) override;
  bool idle() override;
  Status registerMemory(void* base, size_t bytes, uint64_t* id) override { return mrs_->add(base, bytes, id); }
  void unregisterMemory(uint64_t id) override { mrs_->remove(id); }
  bool tryRecv(int peer, RecvChunk* chunk) override;
  void releaseRecv(int peer) override;

  uint32_t prepareSleep() override;
  void cancelSleep() override {}
  void sleep(uint32_t token, int64_t maxNs) override;
  void wake() override { sleeper_.wake(); }
  int pollFd() const override { return sleeper_.fd(); }
  // Asked once per sleep slice of a wait on `peer`: a peer on this host is watched by its pidfd; one
  // elsewhere is probed, since a rank that only waits to receive never sends - a zero-byte RDMA
  // write, which a live peer's NIC acknowledges without waking it, and which fails when the retries
  // run out (~4 s) once the peer's queue pair or link is gone.
  bool peerExited(int peer) override;
  void progress() override { poll(); }
  void forEachSlotRegion(const std::function<void(void*, size_t)>& fn) override {
    if (region_) fn(region_, regionBytes_);
  }

 private:
  struct Peer {
    bool served = false;          // this transport carries this rank's traffic
    ibv_qp* qp = nullptr;
    bool dead = false;
    uint8_t* send = nullptr;      // slots * chunk
    uint8_t* recv = nullptr;      // slots * chunk
    uint64_t remoteRecv = 0;      // the peer's receive slots for this rank
    uint32_t remoteKey = 0;
    uint64_t sendHead = 0;        // chunks committed
    uint64_t credits = 0;         // chunks the peer released
    uint64_t recvHead = 0;        // chunks arrived
    uint64_t recvTail = 0;        // chunks released
    int64_t inFlight = 0;         // work requests posted and not completed
    bool probing = false;         // a liveness probe is in flight
    std::vector<uint32_t> recvBytes;
  };

  IbTransport() = default;
  Status open(const Config& config, PortChoice* port);  // this rank's device, buffers and queues
  void poll();                                          // drains the completion queue
  void postRecv(int peer);
  // An RDMA write of [addr, addr + bytes) (lkey) with immediate `imm` (a chunk or a credit), or
  // without one (a probe: imm < 0); `kind` names it in its work request id.
  void postWrite(int peer, uint64_t addr, uint32_t lkey, uint32_t bytes, uint64_t remote, int64_t imm, uint64_t kind);
  void markDead(int peer, const char* why);

  int rank_ = 0;
  size_t chunk_ = 0;
  int slots_ = 0;
  int sendDepth_ = 0;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;               // the slots
  std::unique_ptr<MrCache> mrs_;       // caller memory (zero copy)
  int64_t zeroCopyInFlight_ = 0;       // zero-copy writes posted and not completed
  uint64_t zeroCopyChunks_ = 0, slotChunks_ = 0;  // chunks sent each way (logged at the end)
  uint8_t* region_ = nullptr;
  size_t regionBytes_ = 0;
  uint32_t unackedEvents_ = 0;
  bool armed_ = false;
  std::vector<Peer> peers_;
  EpollSleeper sleeper_;  // the completion channel's fd
  PeerWatch watch_;       // same-host peers' processes
};

}  // namespace zcoll::ib
