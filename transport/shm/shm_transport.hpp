// shm_transport.hpp - the shared-memory transport, for ranks on one host.
//
// Each rank owns one memfd segment (shm_layout.hpp) holding an inbound FIFO per peer, pre-touched at
// creation and mapped by every peer with MAP_POPULATE, so the data path takes no page fault. The fds
// travel over abstract Unix sockets and are closed once mapped: nothing is named in /dev/shm, and the
// memory goes away with the last mapping, even after kill -9.
// Cost per chunk: the sender writes the slot (one pass over the data, often fused with a reduction),
// the receiver reads it; two atomic stores and a doorbell check per chunk; no syscall unless the
// other side sleeps, no fence where membarrier serves (the sleeper fences for both). A host chunk of
// at most kInlineBytes travels inside its header and takes no data slot (shm_layout.hpp).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "core/socket.hpp"
#include "transport/peer_watch.hpp"
#include "transport/shm/shm_layout.hpp"
#include "transport/transport.hpp"

namespace zcoll::shm {

class ShmTransport final : public Transport {
 public:
  // Collective over the bootstrap: every rank of the communicator calls it. Without `args.members`, it
  // serves every rank (all must be on this host). With `members` (the other ranks of this host, maybe
  // none), it serves those only, as one part of a mixed communicator (transport/mixed_transport.hpp):
  // then it sleeps on an eventfd its peers write (pollFd()), so that it can sleep beside a network
  // transport. With `args.device`, the FIFOs' data lives in device memory of that runtime, shared between
  // the ranks as file descriptors over the same Unix sockets, and the segment holds only the control
  // part: this is the cuda_ipc transport (transport/cuda_ipc/).
  static Status create(const TransportArgs& args, std::unique_ptr<Transport>* out);
  ~ShmTransport() override;

  std::string_view name() const override { return device_ ? "cuda_ipc" : "shm"; }
  MemKind slotMemory() const override { return device_ ? MemKind::Device : MemKind::Host; }
  size_t chunkCapacity() const override { return layout_.slotBytes; }
  int slotsPerPeer() const override { return layout_.slots; }
  // Lockstep: chunks sent ahead leave the caches before their reader comes for them.
  int exchangeWindow(int) const override { return 1; }

  bool tryAcquireSend(int peer, SendSlot* slot) override;
  bool tryAcquireSendFor(int peer, size_t bytes, SendSlot* slot) override;
  void commitSend(int peer, size_t bytes) override;
  bool tryRecv(int peer, RecvChunk* chunk) override;
  void releaseRecv(int peer) override;

  uint32_t prepareSleep() override;
  void cancelSleep() override;
  void sleep(uint32_t token, int64_t maxNs) override;
  void wake() override;
  bool peerExited(int peer) override { return watch_.exited(peer); }
  int pollFd() const override { return wakeFd_.get(); }
  void forEachSlotRegion(const std::function<void(void*, size_t)>& fn) override;
  // zcollMemAlloc memory: host FIFOs only (cuda_ipc's ranks share device memory instead). A peer's
  // allocation is opened through /proc/<pid>/fd/<fd> (same user: no ptrace attach needed), checked
  // to be the memfd the peer named (device and inode), mapped whole and cached until the peer frees
  // any allocation (its free generation changes) or this transport ends. A peer whose memory could
  // not be opened once (another PID namespace, /proc hidden) is not tried again.
  bool mapsPeerMemory() const override { return device_ == nullptr; }
  // With ZCOLL_LOCAL_REGISTER, plain buffers used again too (core/adopted_memory.hpp).
  bool exportMemory(const void* p, size_t bytes, SharedMemRef* ref, ExportScope* scope = nullptr) override {
    return mapsPeerMemory() && sharedMemExport(p, bytes, localRegister_, ref, scope);
  }
  Status importMemory(int peer, const SharedMemRef& ref, void** local) override;

 private:
  struct Peer {
    uint8_t* segment = nullptr;     // the peer's whole segment (our mapping)
    SegmentHeader* header = nullptr;
    FifoCtrl* outCtrl = nullptr;    // FIFO me -> peer, in the peer's segment
    uint8_t* outData = nullptr;
    FifoCtrl* inCtrl = nullptr;     // FIFO peer -> me, in my segment
    const uint8_t* inData = nullptr;
    uint64_t sendHead = 0;          // chunks I published to the peer (headers)
    uint64_t sendData = 0;          // of them, those in a data slot
    uint64_t cachedTail = 0;        // the peer's tail and dataTail as last read
    uint64_t cachedDataTail = 0;
    uint64_t recvTail = 0;          // chunks I released from the peer
    uint64_t recvData = 0;          // of them, those in a data slot
    size_t sendIndex = 0;           // the counts modulo the headers or the data slots (no division per chunk)
    size_t sendDataIndex = 0;
    size_t recvIndex = 0;
    size_t recvDataIndex = 0;
    bool acquiredInline = false;    // the slot last acquired is the next header's inline bytes
    Fd wakeFd;                      // the peer's wake eventfd (mixed communicators)
    // The peer's zcollMemAlloc allocations mapped here, valid while its free generation is this.
    struct Imported {
      uint64_t id;
      uint8_t* base;
      size_t bytes;
    };
    std::vector<Imported> imported;
    uint64_t importGeneration = 0;
    std::string importRefused;  // why mapping its memory failed once (then every later call fails fast)
  };
  static void dropImports(Peer& p);

  ShmTransport() = default;
  void ring(const Peer& p) const;
  size_t nextHeader(size_t i) const { return i + 1 == headers_ ? 0 : i + 1; }
  size_t nextData(size_t i) const { return i + 1 == static_cast<size_t>(layout_.slots) ? 0 : i + 1; }
  bool inlined(size_t bytes) const { return inlineSmall_ && bytes <= kInlineBytes; }
  bool headerRoom(Peer& p);

  Layout layout_;
  int rank_ = 0;
  size_t stride_ = 0;
  size_t headers_ = 0;  // per FIFO: kMaxSlots with host slots, else one per data slot
  bool inlineSmall_ = true;  // host slots: small chunks travel in their header
  bool localRegister_ = false;  // ZCOLL_LOCAL_REGISTER
  bool counted_ = false;        // in the count of host transports (the last one releases registrations)
  // Every rank of the group takes hostBarrier()s: ring() orders its publish before its look at the
  // peer's sleepers with a compiler barrier, and a rank going to sleep pays the fence for both sides
  // (an 8-byte op's seq_cst fence drained the store buffer, whose slot line was still on its way).
  bool lightRing_ = false;
  uint8_t* mine_ = nullptr;
  SegmentHeader* myHeader_ = nullptr;
  std::vector<Peer> peers_;
  PeerWatch watch_;  // peers in other processes
  Fd wakeFd_;        // mixed communicators: this rank's wake eventfd (sleep polls it), else none
  // cuda_ipc: each rank's device data region as mapped here (own allocation and imports).
  DeviceRuntime* device_ = nullptr;
  std::vector<void*> deviceData_;
  size_t deviceMapped_ = 0;
};

}  // namespace zcoll::shm
