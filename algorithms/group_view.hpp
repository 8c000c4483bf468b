// group_view.hpp - a subset of a communicator's ranks seen as a communicator of its own: peer i of
// the view is ranks[i] of the underlying transport. An algorithm run on a context whose transport is
// a view (rank = this rank's index in it, nranks = its size) works on that subset unchanged; the
// hierarchical algorithms run their phases this way (inside a host, then across hosts).
#pragma once

#include "transport/transport.hpp"

namespace zcoll {

class GroupView final : public Transport {
 public:
  GroupView(Transport& base, const int* ranks) : base_(base), ranks_(ranks) {}

  std::string_view name() const override { return base_.name(); }
  size_t chunkCapacity() const override { return base_.chunkCapacity(); }
  int slotsPerPeer() const override { return base_.slotsPerPeer(); }
  int exchangeWindow(int peer) const override { return base_.exchangeWindow(ranks_[peer]); }
  bool tryAcquireSend(int peer, SendSlot* slot) override { return base_.tryAcquireSend(ranks_[peer], slot); }
  bool tryAcquireSendFor(int peer, size_t bytes, SendSlot* slot) override {
    return base_.tryAcquireSendFor(ranks_[peer], bytes, slot);
  }
  void commitSend(int peer, size_t bytes) override { base_.commitSend(ranks_[peer], bytes); }
  bool commitSendFrom(int peer, const void* src, size_t bytes) override {
    return base_.commitSendFrom(ranks_[peer], src, bytes);
  }
  bool tryRecv(int peer, RecvChunk* chunk) override { return base_.tryRecv(ranks_[peer], chunk); }
  void releaseRecv(int peer) override { base_.releaseRecv(ranks_[peer]); }
  uint32_t prepareSleep() override { return base_.prepareSleep(); }
  void cancelSleep() override { base_.cancelSleep(); }
  void sleep(uint32_t token, int64_t maxNs) override { base_.sleep(token, maxNs); }
  void wake() override { base_.wake(); }
  int pollFd() const override { return base_.pollFd(); }
  bool peerExited(int peer) override { return base_.peerExited(ranks_[peer]); }
  void announceWaiting(int peer) override { base_.announceWaiting(peer < 0 ? peer : ranks_[peer]); }
  Culprit culpritOf(int peer) override { return base_.culpritOf(ranks_[peer]); }
  int globalRank(int peer) const override { return base_.globalRank(ranks_[peer]); }
  void progress() override { base_.progress(); }
  bool idle() override { return base_.idle(); }
  MemKind slotMemory() const override { return base_.slotMemory(); }
  void forEachSlotRegion(const std::function<void(void*, size_t)>& fn) override { base_.forEachSlotRegion(fn); }

 private:
  Transport& base_;
  const int* ranks_;
};

}  // namespace zcoll
