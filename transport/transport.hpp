// transport.hpp - the interface every transport implements, and the only one algorithms see.
//
// Model: per ordered pair of ranks, a FIFO of chunks ("slots"), delivered in order.
//  - Sender: tryAcquireSend() gives a slot of up to chunkCapacity() bytes to fill in place (the
//    algorithm copies or reduces straight into it), commitSend() publishes it.
//  - Receiver: tryRecv() shows the next chunk in place (the algorithm copies or reduces straight
//    out of it), releaseRecv() gives the slot back.
// All four are non-blocking and make no syscall and no allocation: they are the hot path. Waiting
// is the caller's (Waiter, below): it spins, yields, then sleeps on the transport's doorbell, which
// every commit and release towards this rank rings.
// A transport knows nothing of collectives: chunk boundaries and sizes are agreed by the algorithm.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/device.hpp"
#include "core/shared_memory.hpp"
#include "core/status.hpp"

namespace zcoll {

class Bootstrap;
struct Config;

// What every transport's create(const TransportArgs&, std::unique_ptr<Transport>*) takes (the
// registry's one signature, transport/registry.hpp). Creation is collective over the bootstrap.
struct TransportArgs {
  Bootstrap& boot;
  const Config& config;
  const std::atomic<bool>* abort = nullptr;  // the communicator's: waits of the creation end when raised
  // Only these ranks are connected (the other hosts' ranks beside shm in a mixed communicator, or this
  // host's ranks for shm's part of it); null: every other rank.
  const std::vector<int>* members = nullptr;
  // ZCOLL_TRANSPORTS names no transport after this one: one that cannot serve every rank fails naming
  // the rank (ib) instead of leaving the choice to the next.
  bool lastChoice = false;
  DeviceRuntime* device = nullptr;  // shm only: slots in this runtime's device memory (cuda_ipc)
};

struct SendSlot {
  void* data = nullptr;
  size_t capacity = 0;
};

struct RecvChunk {
  const void* data = nullptr;
  size_t bytes = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;
  // Largest chunk one slot holds.
  virtual size_t chunkCapacity() const = 0;
  // Slots per peer FIFO: how far a sender may run ahead of its receiver.
  virtual int slotsPerPeer() const = 0;
  // How many chunks a pairwise exchange sends to `peer` ahead of the one it awaits (<= slotsPerPeer):
  // across a network all slots, so that a chunk's latency overlaps the next ones' transfers; shm says
  // 1 (its reader takes each chunk from the writer's cache while it is there).
  virtual int exchangeWindow(int peer) const {
    (void)peer;
    return slotsPerPeer();
  }

  virtual bool tryAcquireSend(int peer, SendSlot* slot) = 0;
  // The same for a chunk of exactly `bytes` (the commit's size): a transport may then give a smaller
  // slot that costs less (shm: a small chunk inside its header, which takes no data slot).
  virtual bool tryAcquireSendFor(int peer, size_t bytes, SendSlot* slot) {
    (void)bytes;
    return tryAcquireSend(peer, slot);
  }
  virtual void commitSend(int peer, size_t bytes) = 0;
  // Zero copy: commits the slot taken by tryAcquireSend with `bytes` read from src (caller memory)
  // instead of the slot's contents, or returns false - the caller then copies into the slot and
  // commits. ib takes memory the caller registered (registerMemory), ucx and tcp any; src must stay
  // unchanged until idle() is true, which the end of every operation waits for.
  virtual bool commitSendFrom(int peer, const void* src, size_t bytes) {
    (void)peer, (void)src, (void)bytes;
    return false;
  }
  virtual bool tryRecv(int peer, RecvChunk* chunk) = 0;
  virtual void releaseRecv(int peer) = 0;

  // Sleeping: prepareSleep() registers this rank as a sleeper and returns a token; the caller then
  // re-checks its condition and either cancelSleep()s or sleep()s, which returns when an event
  // arrived after the token was taken, when wake() was called, or after maxNs.
  virtual uint32_t prepareSleep() = 0;
  virtual void cancelSleep() = 0;
  virtual void sleep(uint32_t token, int64_t maxNs) = 0;
  // Wakes this rank's sleeper (used by abort). Callable from any thread.
  virtual void wake() = 0;
  // A descriptor that turns readable when an event for this rank may have arrived since
  // prepareSleep(), or -1 (the shm transport of a one-host communicator sleeps on a futex). A mixed
  // transport sleeps on its parts' descriptors at once, then calls each part's sleep(token, 0),
  // which must return at once and consume what woke it.
  virtual int pollFd() const { return -1; }
  // Whether the peer's process is known to have exited. Asked by waits that already sleep, so it
  // may make a syscall. A transport that cannot tell says false (the timeout remains).
  virtual bool peerExited(int peer) {
    (void)peer;
    return false;
  }

  // Failure notices, so that every survivor names the first rank that died or stalled (tcp; others
  // say nothing). announceFailure tells every connected peer that this rank's communicator failed
  // because of `culprit` (stalled: it timed out waiting for it; else its process exited).
  // announceWaiting tells them that this rank has waited long (half its deadline) on `peer` (-1: no
  // longer waits), so that a rank timing out on this one can follow the chain of waits to its end.
  // culpritOf(peer) is whom `peer`'s notices blame: its failure notice, else the end of its chain of
  // waits (waiting: true); rank -1: nothing known. Ranks in this transport's numbering.
  struct Culprit {
    int rank = -1;
    bool stalled = false;
    bool waiting = false;  // `peer` has not failed: it waits, directly or through others, on `rank`
  };
  virtual void announceFailure(int culprit, bool stalled) { (void)culprit, (void)stalled; }
  virtual void announceWaiting(int peer) { (void)peer; }
  virtual Culprit culpritOf(int peer) {
    (void)peer;
    return {};
  }
  // The communicator's rank of this transport's `peer` (a sub-group view maps; others are the same).
  virtual int globalRank(int peer) const { return peer; }

  // Whether everything committed so far has left this rank's hands: no frame waits in a send queue
  // for this rank's next call and no transfer still reads caller memory. Moves what it can first,
  // without waiting. Every operation ends by waiting (bounded) for it: a rank that then blocks
  // outside zcoll must not starve a peer of the operation's last frames.
  virtual bool idle() { return true; }
  // A buffer that later operations may send from without a copy (zcollCommRegister): a transport
  // that can (ib) registers it with its NIC and returns an id > 0 for unregisterMemory; 0: nothing.
  virtual Status registerMemory(void* base, size_t bytes, uint64_t* id) {
    (void)base, (void)bytes;
    *id = 0;
    return Status::ok();
  }
  virtual void unregisterMemory(uint64_t id) { (void)id; }

  // Direct access between the processes of one host (zcollMemAlloc memory, core/shared_memory.hpp):
  // whether every peer of this transport can map memory this rank exports (shm alone: all peers on
  // this host, host slots); exportMemory says where [p, p + bytes) is when it is shareable memory;
  // importMemory maps a peer's exported range here (cached: later calls for the same allocation are
  // a lookup) and gives its local address, or fails (the caller then copies as usual).
  virtual bool mapsPeerMemory() const { return false; }
  // scope: the exports of one call (ExportScope), or nullptr.
  virtual bool exportMemory(const void* p, size_t bytes, SharedMemRef* ref, ExportScope* scope = nullptr) {
    (void)p, (void)bytes, (void)ref, (void)scope;
    return false;
  }
  virtual Status importMemory(int peer, const SharedMemRef& ref, void** local) {
    (void)peer, (void)ref, (void)local;
    return notSupported("this transport cannot map a peer's memory");
  }

  // Moves bytes already committed or arriving, without waiting (network transports; shm needs no
  // help). Called while this rank waits on something else - device work - so transfers overlap it.
  virtual void progress() {}
  // Where the slots live: host memory (shm, tcp, ucx) or device memory (cuda_ipc).
  virtual MemKind slotMemory() const { return MemKind::Host; }
  // Calls fn on every memory range that holds slots (send and receive), so that a device runtime can
  // register them and device work reads and writes slots in place.
  virtual void forEachSlotRegion(const std::function<void(void* base, size_t bytes)>& fn) { (void)fn; }
  // A transport that models the cost of memory (zcoll-sim) hears which bytes of the caller's buffers
  // each step reads and writes (Primitives asks once per op); stream: a non-temporal store.
  virtual bool modelsUserMemory() const { return false; }
  virtual void touchUserMemory(const void* p, size_t bytes, bool write, bool stream) {
    (void)p, (void)bytes, (void)write, (void)stream;
  }
};

}  // namespace zcoll
