// zcopy_allreduce.cpp - see zcopy_allreduce.hpp.
#include "algorithms/zcopy_allreduce.hpp"

#include <cerrno>
#include <cstring>

#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"
#include "algorithms/reduce/host_reduce_simd.hpp"
#include "comm/log.hpp"

namespace zcoll {
namespace {

constexpr uint32_t kOfferMagic = 0x7a63704fu;  // "zcpO"

// Round 1's message: the op's signature (a check that the ranks run the same all-reduce) and this
// rank's buffers, when it can offer them.
struct Offer {
  uint32_t magic = kOfferMagic;
  uint32_t shared = 0;  // 1: send and recv below are valid
  uint64_t count = 0;
  int32_t dtype = 0;
  int32_t op = 0;
  SharedMemRef send, recv;
};

// Sends `bytes` of `data` to every peer, then receives `bytes` from every peer into
// out + peer * bytes: one chunk at a time, in the same order on every rank (any FIFO depth suffices).
Status exchange(Primitives& prims, AlgoContext& ctx, const void* data, size_t bytes, uint8_t* out) {
  const int n = ctx.nranks, r = ctx.rank;
  const size_t chunk = prims.chunkElems();
  auto* in = static_cast<const uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t len = std::min(chunk, bytes - off);
    for (int k = 1; k < n; ++k)
      if (Status s = prims.send(patterns::mod(r + k, n), in + off, len); !s) return s;
    for (int k = 1; k < n; ++k) {
      const int peer = patterns::mod(r - k, n);
      if (Status s = prims.recv(peer, out + bytes * static_cast<size_t>(peer) + off, len); !s) return s;
    }
  }
  return Status::ok();
}

}  // namespace

Status zeroCopyAllReduce(const OpArgs& op, AlgoContext& ctx, bool* ran) {
  *ran = false;
  const int n = ctx.nranks, r = ctx.rank;
  Transport* t = ctx.transport;
  const size_t es = dataTypeSize(op.dtype), bytes = op.count * es;
  OpArgs ctrl = op;  // the messages of the three rounds are bytes
  ctrl.dtype = DataType::Uint8;
  Primitives prims(ctrl, ctx, kZeroCopyName);

  // Per-op arrays in the communicator's scratch (no allocation per call): the offers received, the
  // votes, the buffers of every rank as seen here.
  const size_t nn = static_cast<size_t>(n);
  auto* offers = static_cast<Offer*>(ctx.scratch->get(nn * (sizeof(Offer) + 2 * sizeof(void*) + 1)));
  if (!offers) return systemError(fmt::format("allreduce #{} ({}): scratch memory", op.seq, kZeroCopyName), ENOMEM);
  auto** recvs = reinterpret_cast<uint8_t**>(offers + nn);
  auto** sends = reinterpret_cast<const uint8_t**>(static_cast<void*>(recvs + nn));
  auto* votes = reinterpret_cast<uint8_t*>(sends + nn);

  Offer mine;
  mine.count = op.count;
  mine.dtype = static_cast<int32_t>(op.dtype);
  mine.op = static_cast<int32_t>(op.op);
  mine.shared = t->exportMemory(op.sendbuf, bytes, &mine.send) && t->exportMemory(op.recvbuf, bytes, &mine.recv);
  if (Status s = exchange(prims, ctx, &mine, sizeof mine, reinterpret_cast<uint8_t*>(offers)); !s) return s;
  bool all = mine.shared != 0;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const Offer& o = offers[p];
    if (o.magic != kOfferMagic || o.count != mine.count || o.dtype != mine.dtype || o.op != mine.op)
      return remoteError("allreduce #{} ({}): rank {} runs another collective than rank {} (count {} vs {}): the "
                         "ranks are not running the same collective",
                         op.seq, kZeroCopyName, p, r, o.count, mine.count);
    all = all && o.shared != 0;
  }
  if (!all) return Status::ok();  // every rank saw the same offers: all fall back

  // Every rank offered: map the peers' buffers, then agree that everyone could.
  sends[r] = static_cast<const uint8_t*>(op.sendbuf);
  recvs[r] = static_cast<uint8_t*>(op.recvbuf);
  uint8_t mapped = 1;
  for (int p = 0; p < n && mapped; ++p) {
    if (p == r) continue;
    void *s = nullptr, *d = nullptr;
    Status a = t->importMemory(p, offers[p].send, &s);
    Status b = a ? t->importMemory(p, offers[p].recv, &d) : Status::ok();
    if (!a || !b) {
      ZCOLL_WARN(Coll, r, "allreduce #{}: zero copy off for this op: {}", op.seq, (!a ? a : b).message());
      mapped = 0;
      break;
    }
    sends[p] = static_cast<const uint8_t*>(s);
    recvs[p] = static_cast<uint8_t*>(d);
  }
  if (Status s = exchange(prims, ctx, &mapped, 1, votes); !s) return s;
  for (int p = 0; p < n; ++p)
    if (p != r && !votes[p]) mapped = 0;
  if (!mapped) return Status::ok();

  // This rank's slice, from every sendbuff into every recvbuff: out of cache in one pass (every
  // recvbuff at the same offset within a line, as buffers of one layout are), else through a block
  // in L1.
  const patterns::BlockPartition slices{op.count, n};
  const size_t begin = slices.offset(r) * es, end = begin + slices.size(r) * es;
  size_t line = 0;
  const ReduceToAllFn toAll = ctx.streamStores ? streamReduceToAllFunction(op.dtype, op.op, &line) : nullptr;
  bool oneLayout = toAll != nullptr;
  for (int p = 0; p < n && oneLayout; ++p) {
    const auto at = reinterpret_cast<uintptr_t>(recvs[p] + begin);
    oneLayout = at % es == 0 && at % line == reinterpret_cast<uintptr_t>(recvs[0] + begin) % line;
  }
  if (oneLayout && end > begin) {
    // The slice's start in every buffer: the pointer arrays again, offset (they are not used after).
    for (int p = 0; p < n; ++p) {
      sends[p] += begin;
      recvs[p] += begin;
    }
    toAll(reinterpret_cast<void* const*>(recvs), n, reinterpret_cast<const void* const*>(sends), n, (end - begin) / es);
  } else {
    const ReduceFn reduce = reduceFunction(op.dtype, op.op);
    const FinalizeFn finalize = finalizeFunction(op.dtype, op.op);
    const int divisor = ctx.avgDivisor > 0 ? ctx.avgDivisor : n;
    constexpr size_t kBlockBytes = 16384;  // in L1 between the reduction and the stores
    alignas(64) uint8_t block[kBlockBytes];
    const size_t step = kBlockBytes / es * es;
    for (size_t off = begin; off < end; off += step) {
      const size_t len = std::min(step, end - off), k = len / es;
      reduce(block, sends[0] + off, sends[1] + off, k);
      for (int p = 2; p < n; ++p) reduce(block, block, sends[p] + off, k);
      if (finalize) finalize(block, k, divisor);
      for (int p = 0; p < n; ++p) {
        uint8_t* d = recvs[p] + off;
        if (ctx.streamStores) streamBytes(d, block, len, false);
        else copyBytes(d, block, len);
      }
    }
  }
  storeFence();
  // Done: nobody returns while a peer still reads its sendbuff or writes its recvbuff.
  const uint8_t done = 1;
  if (Status s = exchange(prims, ctx, &done, 1, votes); !s) return s;
  ZCOLL_TRACE(Coll, r, "allreduce #{}: zero copy over {} ranks' zcollMemAlloc buffers", op.seq, n);
  *ran = true;
  return Status::ok();
}

}  // namespace zcoll
