// mixed_transport.hpp - one communicator over two transports: the ranks on this host through shared
// memory, the others through a network transport (ib, tcp or ucx). Algorithms see one Transport;
// each call goes to the part that serves the peer.
//
// Sleeping on both at once: prepareSleep() prepares each part (the shm part then sleeps on an eventfd
// its peers write, not on its futex), sleep() waits in one ppoll on every part's pollFd() and this
// transport's own eventfd (wake()), then lets each part consume what woke it (sleep(token, 0)).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/socket.hpp"
#include "core/status.hpp"
#include "transport/transport.hpp"

namespace zcoll {

class MixedTransport final : public Transport {
 public:
  // local serves the peers with viaLocal[peer] != 0, remote the others.
  static Status create(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote,
                       std::vector<uint8_t> viaLocal, std::unique_ptr<Transport>* out);

  std::string_view name() const override { return name_; }
  size_t chunkCapacity() const override { return capacity_; }
  int slotsPerPeer() const override { return slots_; }
  int exchangeWindow(int peer) const override { return std::min(slots_, part(peer).exchangeWindow(peer)); }

  // A rank that waits on a same-host peer keeps the network part moving (tcp hands pending frames to
  // its sockets, ucx progresses its worker): else a frame committed to another host at the end of an
  // operation could wait, unsent, while this rank waits on shm - and the other host on it. Only when
  // the shm call finds nothing (the rank is about to wait): a ready chunk costs no network call.
  bool tryAcquireSend(int peer, SendSlot* slot) override {
    return part(peer).tryAcquireSend(peer, slot) || missed(peer);
  }
  bool tryAcquireSendFor(int peer, size_t bytes, SendSlot* slot) override {
    return part(peer).tryAcquireSendFor(peer, bytes, slot) || missed(peer);
  }
  void commitSend(int peer, size_t bytes) override { part(peer).commitSend(peer, bytes); }
  bool commitSendFrom(int peer, const void* src, size_t bytes) override {
    return part(peer).commitSendFrom(peer, src, bytes);
  }
  bool tryRecv(int peer, RecvChunk* chunk) override { return part(peer).tryRecv(peer, chunk) || missed(peer); }
  void releaseRecv(int peer) override { part(peer).releaseRecv(peer); }

  uint32_t prepareSleep() override;
  void cancelSleep() override;
  void sleep(uint32_t token, int64_t maxNs) override;
  void wake() override;
  bool peerExited(int peer) override { return part(peer).peerExited(peer); }
  void announceFailure(int culprit, bool stalled) override {
    local_->announceFailure(culprit, stalled);
    remote_->announceFailure(culprit, stalled);
  }
  void announceWaiting(int peer) override {
    local_->announceWaiting(peer);
    remote_->announceWaiting(peer);
  }
  Culprit culpritOf(int peer) override { return part(peer).culpritOf(peer); }
  void progress() override {
    local_->progress();
    remote_->progress();
  }
  bool idle() override { return local_->idle() && remote_->idle(); }
  // Only the network part sends from caller memory.
  Status registerMemory(void* base, size_t bytes, uint64_t* id) override {
    return remote_->registerMemory(base, bytes, id);
  }
  void unregisterMemory(uint64_t id) override { remote_->unregisterMemory(id); }
  void forEachSlotRegion(const std::function<void(void*, size_t)>& fn) override {
    local_->forEachSlotRegion(fn);
    remote_->forEachSlotRegion(fn);
  }

 private:
  MixedTransport() = default;
  Transport& part(int peer) const { return viaLocal_[static_cast<size_t>(peer)] ? *local_ : *remote_; }
  // A same-host call that found nothing: move the network part along before the caller waits (false).
  bool missed(int peer) {
    if (viaLocal_[static_cast<size_t>(peer)]) remote_->progress();
    return false;
  }

  std::unique_ptr<Transport> local_, remote_;
  std::vector<uint8_t> viaLocal_;
  std::string name_;
  size_t capacity_ = 0;
  int slots_ = 0;
  uint32_t localToken_ = 0, remoteToken_ = 0;
  Fd wake_;  // eventfd: wake() from any thread
};

}  // namespace zcoll
