// primitives.hpp - the chunk-level steps every algorithm is written in (after NCCL's primitives).
//
// Each call moves exactly one chunk (n <= chunkElems() elements) and blocks, through the Waiter,
// until it is done: it takes the next incoming chunk from recvPeer and/or a free slot towards
// sendPeer, and computes straight between user memory and transport slots:
//   send               slot      = local
//   recv               dst       = in
//   recvReduce         dst       = in OP local            (finalize: / nranks for Avg)
//   recvReduceSend     slot      = in OP local
//   recvReduceCopySend dst       = in OP local; slot = dst
//   recvCopySend       dst = in; slot = in
//   recvReduceOut      dst       = in OP local, finalized: a result this op does not read again
// In an operation larger than the cache (AlgoContext::streamStores) the values stored into dst by
// recv, recvCopySend, recvReduceCopySend and recvReduceOut bypass the cache (non-temporal stores):
// an algorithm reads dst written by those steps back only where it would be out of cache anyway.
// Both sides of a transfer compute the same chunk size; a chunk of another size is a RemoteError.
// Ring schedules stay deadlock-free with >= 2 slots per FIFO (docs/algorithms.md has the argument).
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms/algorithm.hpp"
#include "kernels/host_copy.hpp"
#include "kernels/host_reduce.hpp"

namespace zcoll {

class Primitives {
 public:
  Primitives(const OpArgs& op, AlgoContext& ctx, std::string_view algoName);

  size_t elemSize() const { return elemSize_; }
  size_t chunkElems() const { return chunkElems_; }
  // How many chunks an exchange with `peer` sends ahead of the one it awaits (Transport::exchangeWindow).
  int window(int peer) const { return ctx_.transport->exchangeWindow(peer); }
  bool onDevice() const { return dev_ != nullptr; }

  Status send(int peer, const void* local, size_t n) { return step(-1, peer, local, nullptr, n, false, false, false); }
  Status recv(int peer, void* dst, size_t n) { return step(peer, -1, nullptr, dst, n, false, false, stream_); }
  Status recvReduce(int peer, const void* local, void* dst, size_t n, bool finalize) {
    return step(peer, -1, local, dst, n, true, finalize, false);
  }
  Status recvReduceOut(int peer, const void* local, void* dst, size_t n) {
    return step(peer, -1, local, dst, n, true, true, stream_);
  }
  Status recvReduceSend(int recvPeer, int sendPeer, const void* local, size_t n) {
    return step(recvPeer, sendPeer, local, nullptr, n, true, false, false);
  }
  Status recvReduceCopySend(int recvPeer, int sendPeer, const void* local, void* dst, size_t n, bool finalize) {
    return step(recvPeer, sendPeer, local, dst, n, true, finalize, stream_);
  }
  Status recvCopySend(int recvPeer, int sendPeer, void* dst, size_t n) {
    return step(recvPeer, sendPeer, nullptr, dst, n, false, false, stream_);
  }

  // Local work, no transport: dst = src; and the Avg division of a final result. On device memory
  // they are queued on the device stream (in order with the steps).
  void copy(void* dst, const void* src, size_t n) const {
    if (dst == src || !n) return;
    if (modelsMemory_) touchMemory(src, dst, n, false);
    if (sizesOnly_) return;
    if (dev_) deviceCopy(dst, src, n * elemSize_);
    else copyBytes(dst, src, n * elemSize_);
  }
  void finalize(void* data, size_t n) const {
    if (!finalize_ || !n || sizesOnly_) return;
    if (dev_) deviceDivide(data, n);
    else finalize_(data, n, divisor_);
  }
  // bytes from src to dst now, between any memory of this operation and transport slots (send/recv
  // batches): a host copy, or a device copy waited for.
  Status copyNow(void* dst, const void* src, size_t bytes);
  // The whole reduction on one rank: dst = src, finalized.
  void reduceAlone(void* dst, const void* src, size_t n) const {
    copy(dst, src, n);
    finalize(dst, n);
  }

  // The Status of a wait that did not end in Ready, naming the op, the algorithm step (the number
  // of the primitive in this rank's schedule, its kind and size) and the peer.
  Status waitFailure(WaitResult r, int peer, std::string_view what) const;

 private:
  // stream: dst is written with non-temporal stores (host operations only).
  Status step(int recvPeer, int sendPeer, const void* local, void* dst, size_t n, bool reduce, bool finalize,
              bool stream);
  // The host half of step(); true when it committed the send itself (zero copy).
  bool hostStep(const RecvChunk& in, const SendSlot& out, int recvPeer, int sendPeer, const void* local, void* dst,
                size_t n, bool reduce, bool finalize, bool stream);
  // dst = a OP b (finalized) with non-temporal stores, through an L1-sized block.
  void streamReduce(void* dst, const void* a, const void* b, size_t n, bool finalize) const;
  // The device half of step(): queue the chunk's work, wait for it.
  Status deviceStep(const RecvChunk& in, const SendSlot& out, bool recv, bool send, const void* local, void* dst,
                    size_t n, bool reduce, bool finalize);
  void deviceCopy(void* dst, const void* src, size_t bytes) const;
  void deviceDivide(void* data, size_t n) const;
  const char* stepKind() const;
  // What a step reads (src) and writes (dst) of the caller's memory, told to a transport that models it.
  void touchMemory(const void* src, void* dst, size_t n, bool stream) const;

  // The step in progress, for failure messages only: a counter and a few stores per chunk.
  int64_t steps_ = 0;
  size_t stepBytes_ = 0;
  bool stepRecv_ = false, stepSend_ = false, stepReduce_ = false, stepStore_ = false;

  const OpArgs& op_;
  AlgoContext& ctx_;
  std::string_view algoName_;
  int divisor_;  // Avg divides by this: the rank count, or AlgoContext::avgDivisor
  size_t elemSize_;
  size_t chunkElems_;
  ReduceFn reduce_;
  FinalizeFn finalize_;
  DeviceExecutor* dev_;  // device operation, else nullptr
  bool slotsOnHost_;     // the transport's slots are host memory (copies between them need no device)
  bool stream_;          // AlgoContext::streamStores, host operations only
  bool sizesOnly_;       // AlgoContext::sizesOnly
  bool modelsMemory_;    // Transport::modelsUserMemory (zcoll-sim)
};

// The Status of a wait that did not end in Ready; `where` names the op, the algorithm, the step and
// the peer waited for; deadPeer: Waiter::deadPeer() (PeerDied).
// A failed wait for `peer` (ctx's transport numbering): its message, naming the first rank that died or
// stalled - a peer that announced it failed because of another rank passes the blame on - which is
// also recorded in ctx.waiter for the communicator to announce.
Status waitFailure(WaitResult r, const std::string& where, int peer, const AlgoContext& ctx);
// A chunk of `got` bytes from `peer` where `due` were: the ranks run different collectives.
Status chunkSizeMismatch(const OpArgs& op, std::string_view algo, int rank, size_t got, int peer, size_t due);

// Calls f(offset, n) for each chunk of [begin, end) (element offsets), stopping at the first failure.
template <typename F>
Status forChunks(size_t begin, size_t end, size_t chunk, F&& f) {
  for (size_t off = begin; off < end; off += chunk)
    if (Status s = f(off, std::min(chunk, end - off)); !s) return s;
  return Status::ok();
}

// A pairwise exchange: chunk i of the outgoing [0, sendCount) and chunk i of the incoming
// [0, recvCount); both sides agree on the two counts (mirrored). Up to `window` chunks go out ahead of
// the one awaited (the transport's slots per peer: its FIFO holds them all, and receiving needs no send
// slot), so that each chunk's latency overlaps the transfers of the next ones instead of adding up
// chunk after chunk. A chunk always leaves before the one at its offset comes in (in-place exchanges
// rely on it). sendFn/recvFn(offset, n) return Status.
template <typename SendFn, typename RecvFn>
Status exchangeChunks(size_t sendCount, size_t recvCount, size_t chunk, int window, SendFn&& sendFn,
                      RecvFn&& recvFn) {
  const size_t ahead = static_cast<size_t>(std::max(window, 1));
  size_t sent = 0;  // offset of the next chunk to send
  for (size_t in = 0; in < recvCount || sent < sendCount; in += chunk) {
    while (sent < sendCount && sent < in + ahead * chunk) {
      if (Status s = sendFn(sent, std::min(chunk, sendCount - sent)); !s) return s;
      sent += chunk;
    }
    if (in < recvCount)
      if (Status s = recvFn(in, std::min(chunk, recvCount - in)); !s) return s;
  }
  return Status::ok();
}

}  // namespace zcoll
