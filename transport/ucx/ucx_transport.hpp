// ucx_transport.hpp - the UCX transport: every peer through a UCP endpoint of one worker per
// communicator, with tagged messages.
//
// The slot model over UCP tag matching: per peer, `slots` receive slots with a tagged receive
// always posted on each free one (tag: this communicator and the sender's rank, so UCX keeps them in
// order), and `slots` send slots, each in flight until its ucp_tag_send_nbx completes (a chunk of
// memory that stays unchanged until the op ends goes out from there: commitSendFrom). Progress is
// ucp_worker_progress on every call; sleeping arms the worker (ucp_worker_arm) and waits on its
// event fd beside an eventfd for wake(). UCX chooses the wire itself (shared memory, TCP,
// InfiniBand/RoCE verbs) and honours its own variables (UCX_TLS, UCX_NET_DEVICES). An endpoint
// error (the peer went away) marks the peer dead.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/config.hpp"
#include "core/socket.hpp"
#include "transport/epoll_sleeper.hpp"
#include "transport/transport.hpp"

namespace zcoll::ucx {

class UcxTransport final : public Transport {
 public:
  // Collective over the bootstrap.
  // With `args.members`, only those ranks get an endpoint and slots (a mixed communicator's other hosts).
  static Status create(const TransportArgs& args, std::unique_ptr<Transport>* out);
  ~UcxTransport() override;

  std::string_view name() const override { return "ucx"; }
  size_t chunkCapacity() const override { return chunk_; }
  int slotsPerPeer() const override { return slots_; }

  bool tryAcquireSend(int peer, SendSlot* slot) override;
  void commitSend(int peer, size_t bytes) override;
  // UCX sends from caller memory itself (its registration cache and memory hooks make any stable
  // buffer safe): the slot's copy is skipped for every stable source, registered or not.
  bool commitSendFrom(int peer, const void* src, size_t bytes) override;
  bool tryRecv(int peer, RecvChunk* chunk) override;
  void releaseRecv(int peer) override;

  uint32_t prepareSleep() override;
  void cancelSleep() override {}
  void sleep(uint32_t token, int64_t maxNs) override;
  void wake() override { sleeper_.wake(); }
  int pollFd() const override { return sleeper_.fd(); }
  bool peerExited(int peer) override { return peers_[static_cast<size_t>(peer)].dead; }
  void progress() override;
  bool idle() override;  // every send completed
  void forEachSlotRegion(const std::function<void(void*, size_t)>& fn) override {
    for (Peer& p : peers_) {
      if (!p.send.empty()) fn(p.send.data(), p.send.size());
      if (!p.recv.empty()) fn(p.recv.data(), p.recv.size());
    }
  }

  // Per-operation state the callbacks write (public for the C callbacks).
  struct Op {
    void* request = nullptr;
    bool busy = false;   // posted and not yet completed
    bool done = false;   // completed (the callback ran or it completed at once)
    ucs_status_t status = UCS_OK;
    size_t length = 0;   // receives: bytes received

  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    bool dead = false;
    std::vector<uint8_t> send, recv;
    std::vector<Op> sendOps, recvOps;
    uint64_t sendHead = 0, sendDone = 0;  // slots committed / completed
    uint64_t recvTail = 0;                // slots released (a receive is posted on every free one)
  };

 private:
  UcxTransport() = default;
  void postRecv(int peer, size_t slot);
  void postSend(int peer, const void* data, size_t bytes);  // the next slot's send, from data
  void retire(Op& op);  // frees a completed request
  void retireSends(Peer& p);  // retires p's completed sends, oldest first

  size_t chunk_ = 0;
  int slots_ = 0;
  int rank_ = 0;
  uint64_t tagBase_ = 0;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<Peer> peers_;
  EpollSleeper sleeper_;  // the worker's event fd
  bool armed_ = false;
};

}  // namespace zcoll::ucx
