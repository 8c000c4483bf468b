// p2p_batch.cpp - a batch of point-to-point sends and receives (zcollSend/zcollRecv, grouped or
// alone), progressed together so that pairs of ranks exchanging in both directions, or a rank
// receiving from many, cannot deadlock.
//
// Transfers to or from one peer run in call order (they share the FIFO); each step moves the next
// chunk of every transfer that can move, and the Waiter sleeps only when none can. Sends to
// oneself are paired in order with receives from oneself and copied directly.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "algorithms/primitives.hpp"
#include "kernels/host_copy.hpp"

namespace zcoll {
namespace {

class P2PBatch final : public AlgorithmOf<Collective::SendRecv> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const P2PItem* items = op.items;
    const size_t count = op.nitems;
    if (Status s = copySelf(prims, items, count, ctx.rank); !s) return s;

    // Progress of each transfer, in bytes; self transfers are already complete.
    // A transfer may move only when the previous one to/from the same peer is complete.
    constexpr size_t kDone = SIZE_MAX;
    std::vector<size_t>& progress = scratch();
    progress.assign(count, 0);
    size_t remaining = 0;
    for (size_t i = 0; i < count; ++i) {
      if (items[i].peer == ctx.rank) progress[i] = kDone;
      else remaining++;
    }
    Transport* t = ctx.transport;
    const size_t cap = ctx.chunkBytes;
    // A receive from any peer (zcollRecvAny: alone in its batch) takes the first peer whose FIFO
    // holds a chunk, and that peer's message from then on.
    auto bindAny = [&](P2PItem& it) {
      for (int k = 1; k < ctx.nranks && it.peer == P2PItem::kAnyPeer; ++k) {
        const int peer = (ctx.rank + k) % ctx.nranks;
        RecvChunk probe;
        if (t->tryRecv(peer, &probe)) it.peer = peer;
      }
      if (it.peer != P2PItem::kAnyPeer && it.source) *it.source = it.peer;
      return it.peer != P2PItem::kAnyPeer;
    };
    P2PItem anyItem = count == 1 ? items[0] : P2PItem{};
    auto blockedByEarlier = [&](size_t i) {
      for (size_t j = 0; j < i; ++j)
        if (progress[j] != kDone && items[j].peer == items[i].peer && items[j].isSend == items[i].isSend) return true;
      return false;
    };
    Status failure;
    int waitingOn = -1;
    auto advance = [&]() {
      bool moved = false;
      for (size_t i = 0; i < count && failure; ++i) {
        if (progress[i] == kDone || blockedByEarlier(i)) continue;
        if (items[i].peer == P2PItem::kAnyPeer && anyItem.peer == P2PItem::kAnyPeer && !bindAny(anyItem)) continue;
        const P2PItem& it = items[i].peer == P2PItem::kAnyPeer ? anyItem : items[i];
        waitingOn = it.peer;
        size_t left = it.bytes - progress[i];
        if (it.isSend) {
          SendSlot slot;
          if (left == 0 || !t->tryAcquireSend(it.peer, &slot)) {
            if (left != 0) continue;
          } else {
            size_t n = std::min(left, cap);
            const char* src = static_cast<const char*>(it.buf) + progress[i];
            // A send buffer stays unchanged until the batch ends (writing it meanwhile is the
            // caller's race, as in NCCL): host memory may go out without the copy.
            if (prims.onDevice() || !t->commitSendFrom(it.peer, src, n)) {
              if (Status s = prims.copyNow(slot.data, src, n); !s) {
                failure = std::move(s);
                return true;
              }
              t->commitSend(it.peer, n);
            }
            left -= n;
          }
        } else {
          RecvChunk chunk;
          if (left == 0 || !t->tryRecv(it.peer, &chunk)) {
            if (left != 0) continue;
          } else {
            if (chunk.bytes > left || (chunk.bytes < left && chunk.bytes != cap)) {
              failure = remoteError(
                  "recv #{} from rank {}: rank {} got a {}-byte chunk with {} bytes still due: send and recv "
                  "sizes differ",
                  op.seq, it.peer, ctx.rank, chunk.bytes, left);
              return true;
            }
            if (Status s = prims.copyNow(static_cast<char*>(it.buf) + progress[i], chunk.data, chunk.bytes); !s) {
              failure = std::move(s);
              return true;
            }
            t->releaseRecv(it.peer);
            left -= chunk.bytes;
          }
        }
        progress[i] = left == 0 ? kDone : it.bytes - left;
        if (left == 0) remaining--;
        moved = true;
      }
      return moved || remaining == 0;
    };
    // A dead peer is a failure only while a transfer with it is still pending.
    auto deadPeer = [&]() {
      for (size_t i = 0; i < count; ++i) {
        const int peer = items[i].peer == P2PItem::kAnyPeer ? anyItem.peer : items[i].peer;
        if (progress[i] != kDone && peer >= 0 && t->peerExited(peer)) return peer;
      }
      return -1;
    };
    while (remaining > 0) {
      WaitResult r = ctx.waiter->until(advance, deadPeer);
      if (!failure) return failure;
      if (r == WaitResult::PeerDied) waitingOn = ctx.waiter->deadPeer();
      if (r != WaitResult::Ready) return prims.waitFailure(r, waitingOn, "in send/recv with");
    }
    return Status::ok();
  }

 private:
  // One scratch vector per thread: no allocation per call once it has grown.
  static std::vector<size_t>& scratch() {
    thread_local std::vector<size_t> v;
    return v;
  }

  static Status copySelf(Primitives& prims, const P2PItem* items, size_t count, int rank) {
    size_t nextRecv = 0;
    for (size_t i = 0; i < count; ++i) {
      if (!items[i].isSend || items[i].peer != rank) continue;
      while (nextRecv < count && (items[nextRecv].isSend || items[nextRecv].peer != rank)) nextRecv++;
      if (nextRecv == count)
        return invalidUsage("zcollSend to self (rank {}) needs a matching zcollRecv from self in the same group", rank);
      if (items[nextRecv].bytes != items[i].bytes)
        return invalidUsage("send to self of {} bytes matched with a recv from self of {} bytes", items[i].bytes,
                            items[nextRecv].bytes);
      if (prims.onDevice()) {
        if (Status s = prims.copyNow(items[nextRecv].buf, items[i].buf, items[i].bytes); !s) return s;
      } else if (items[i].bytes) {
        std::memmove(items[nextRecv].buf, items[i].buf, items[i].bytes);
      }
      nextRecv++;
    }
    for (size_t i = nextRecv; i < count; ++i)
      if (!items[i].isSend && items[i].peer == rank)
        return invalidUsage("zcollRecv from self (rank {}) has no matching zcollSend to self in the same group", rank);
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(p2pBatch, P2PBatch, "p2p")

}  // namespace zcoll
