// primitives.cpp - see primitives.hpp.
#include "algorithms/primitives.hpp"

#include <bit>

#include <fmt/format.h>

#include "algorithms/device_executor.hpp"

namespace zcoll {

static_assert([] {
  for (int t = 0; t < kNumDataTypes; ++t)
    if (!std::has_single_bit(dataTypeSize(static_cast<DataType>(t)))) return false;
  return true;
}(), "element sizes must be powers of two (chunkElems_ is a shift)");

Primitives::Primitives(const OpArgs& op, AlgoContext& ctx, std::string_view algoName)
    : op_(op),
      ctx_(ctx),
      algoName_(algoName),
      divisor_(ctx.avgDivisor > 0 ? ctx.avgDivisor : ctx.nranks),
      elemSize_(dataTypeSize(op.dtype)),
      // Element sizes are powers of two: a shift, not a division per op.
      chunkElems_(elemSize_ ? ctx.chunkBytes >> std::countr_zero(elemSize_) : 0),
      reduce_(reduceFunction(op.dtype, op.op)),
      finalize_(finalizeFunction(op.dtype, op.op)),
      dev_(ctx.device),
      slotsOnHost_(ctx.transport->slotMemory() == MemKind::Host),
      stream_(ctx.streamStores && ctx.device == nullptr),
      sizesOnly_(ctx.sizesOnly),
      modelsMemory_(ctx.transport->modelsUserMemory() && ctx.device == nullptr) {}

void Primitives::touchMemory(const void* src, void* dst, size_t n, bool stream) const {
  const size_t bytes = n * elemSize_;
  if (src) ctx_.transport->touchUserMemory(src, bytes, false, false);
  if (dst) ctx_.transport->touchUserMemory(dst, bytes, true, stream);
}

const char* Primitives::stepKind() const {
  if (stepRecv_ && stepSend_) return stepReduce_ ? (stepStore_ ? "recvReduceCopySend" : "recvReduceSend") : "recvCopySend";
  if (stepRecv_) return stepReduce_ ? "recvReduce" : "recv";
  return "send";
}

Status waitFailure(WaitResult r, const std::string& where, int peer, const AlgoContext& ctx) {
  if (r == WaitResult::Aborted) return Status(StatusCode::Aborted, where + ": communicator aborted");
  const int direct = r == WaitResult::PeerDied ? ctx.waiter->deadPeer() : peer;
  Transport::Culprit told = direct >= 0 ? ctx.transport->culpritOf(direct) : Transport::Culprit{};
  if (told.waiting && r == WaitResult::PeerDied) told = {};  // it died while waiting: the blame stops there
  if (told.rank >= 0) {
    ctx.waiter->blame(told.rank, told.stalled);
    const char* how = told.stalled ? "stalled (its peers timed out waiting for it)" : "exited";
    if (told.waiting)
      return Status(StatusCode::Timeout, fmt::format("{}: timed out: rank {} waits in turn on rank {}, which {}", where,
                                ctx.transport->globalRank(direct), told.rank, how));
    return Status(StatusCode::RemoteError,
                  fmt::format("{}: rank {} failed because rank {} {}", where, ctx.transport->globalRank(direct),
                              told.rank, how));
  }
  if (direct >= 0) ctx.waiter->blame(ctx.transport->globalRank(direct), r != WaitResult::PeerDied);
  if (r == WaitResult::PeerDied)
    return Status(StatusCode::RemoteError, fmt::format("{}: rank {}'s process has exited", where, direct));
  return Status(StatusCode::Timeout, where + ": timed out (is the peer alive and in the same collective?)");
}

Status chunkSizeMismatch(const OpArgs& op, std::string_view algo, int rank, size_t got, int peer, size_t due) {
  return remoteError("{} #{} ({}): rank {} got a {}-byte chunk from rank {} where {} bytes were due: the ranks "
                     "are not running the same collective",
                     collectiveName(op.coll), op.seq, algo, rank, got, peer, due);
}

Status Primitives::waitFailure(WaitResult r, int peer, std::string_view what) const {
  const std::string step = steps_ ? fmt::format(" at step {} ({}, {} bytes)", steps_, stepKind(), stepBytes_) : "";
  return zcoll::waitFailure(r,
                            fmt::format("{} #{} ({}, {} x {}): rank {}{} {} rank {}", collectiveName(op_.coll), op_.seq,
                                        algoName_, op_.count, dataTypeName(op_.dtype), ctx_.rank, step, what, peer),
                            peer, ctx_);
}

Status Primitives::step(int recvPeer, int sendPeer, const void* local, void* dst, size_t n, bool reduce,
                        bool finalize, bool stream) {
  if (n == 0) return Status::ok();
  Transport* t = ctx_.transport;
  const size_t bytes = n * elemSize_;
  ++steps_;
  const int64_t t0 = ctx_.tracer ? nowNs() : 0;
  stepBytes_ = bytes;
  stepRecv_ = recvPeer >= 0;
  stepSend_ = sendPeer >= 0;
  stepReduce_ = reduce;
  stepStore_ = dst != nullptr;
  RecvChunk in;
  SendSlot out;
  if (recvPeer >= 0) {
    WaitResult r = ctx_.waiter->until([&] { return t->tryRecv(recvPeer, &in); },
                                      [&] { return t->peerExited(recvPeer) ? recvPeer : -1; }, t, recvPeer);
    if (r != WaitResult::Ready) return waitFailure(r, recvPeer, "waiting for data from");
    if (in.bytes != bytes) return chunkSizeMismatch(op_, algoName_, ctx_.rank, in.bytes, recvPeer, bytes);
  }
  if (sendPeer >= 0) {
    WaitResult r = ctx_.waiter->until([&] { return t->tryAcquireSendFor(sendPeer, bytes, &out); },
                                      [&] { return t->peerExited(sendPeer) ? sendPeer : -1; }, t, sendPeer);
    if (r != WaitResult::Ready) return waitFailure(r, sendPeer, "waiting for FIFO room at");
  }

  bool committed = false;
  if (modelsMemory_) touchMemory(local, dst, n, stream);
  if (sizesOnly_) {
    // nothing to move: the transport prices the chunk's bytes
  } else if (dev_) {
    if (Status s = deviceStep(in, out, recvPeer >= 0, sendPeer >= 0, local, dst, n, reduce, finalize); !s) return s;
  } else {
    committed = hostStep(in, out, recvPeer, sendPeer, local, dst, n, reduce, finalize, stream && dst);
  }
  if (recvPeer >= 0) t->releaseRecv(recvPeer);
  if (sendPeer >= 0 && !committed) t->commitSend(sendPeer, bytes);
  if (ctx_.tracer) ctx_.tracer->step(stepKind(), recvPeer >= 0 ? recvPeer : sendPeer, bytes, t0, nowNs());
  return Status::ok();
}

bool Primitives::hostStep(const RecvChunk& in, const SendSlot& out, int recvPeer, int sendPeer, const void* local,
                          void* dst, size_t n, bool reduce, bool finalize, bool stream) {
  const bool recv = recvPeer >= 0, send = sendPeer >= 0;
  const size_t bytes = n * elemSize_;
  const void* value = local;  // what goes out
  if (reduce && stream && send) {
    // Reduced into the slot (in cache, read back for dst), dst streamed.
    reduce_(out.data, in.data, local, n);
    if (finalize && finalize_) finalize_(out.data, n, divisor_);
    streamBytes(dst, out.data, bytes);
    return false;
  }
  if (reduce && stream) {
    streamReduce(dst, in.data, local, n, finalize);
    value = dst;
  } else if (reduce) {
    void* target = dst ? dst : out.data;
    reduce_(target, in.data, local, n);
    if (finalize && finalize_) finalize_(target, n, divisor_);
    value = target;
  } else if (recv) {
    if (dst && stream) streamBytes(dst, in.data, bytes);
    else if (dst) copyBytes(dst, in.data, bytes);
    value = in.data;
  }
  if (!send || value == out.data) return false;
  // Memory that stays unchanged until the op ends may go out without the copy (a transport that
  // can - ib from registered memory, ucx and tcp from any - commits it itself).
  auto v = reinterpret_cast<uintptr_t>(value), stable = reinterpret_cast<uintptr_t>(ctx_.stableSrc);
  if (v >= stable && v + bytes <= stable + ctx_.stableBytes && ctx_.transport->commitSendFrom(sendPeer, value, bytes))
    return true;
  copyBytes(out.data, value, bytes);
  return false;
}

void Primitives::streamReduce(void* dst, const void* a, const void* b, size_t n, bool finalize) const {
  constexpr size_t kBlockBytes = 4096;  // stays in L1 between the reduction and the copy
  alignas(64) char block[kBlockBytes];
  const size_t per = kBlockBytes / elemSize_;
  auto* d = static_cast<char*>(dst);
  auto* x = static_cast<const char*>(a);
  auto* y = static_cast<const char*>(b);
  for (size_t i = 0; i < n; i += per) {
    const size_t k = std::min(per, n - i), off = i * elemSize_;
    reduce_(block, x + off, y + off, k);
    if (finalize && finalize_) finalize_(block, k, divisor_);
    streamBytes(d + off, block, k * elemSize_, false);
  }
  storeFence();
}

Status Primitives::deviceStep(const RecvChunk& in, const SendSlot& out, bool recv, bool send, const void* local,
                              void* dst, size_t n, bool reduce, bool finalize) {
  const size_t bytes = n * elemSize_;
  const int divisor = finalize && finalize_ ? divisor_ : 0;
  if (reduce) {
    // One kernel: in OP local into dst (or the slot), and into the slot too when both.
    dev_->reduce(dst ? dst : out.data, dst && send ? out.data : nullptr, in.data, local, n, op_.dtype, op_.op, divisor);
  } else if (recv) {
    if (dst) dev_->copy(dst, in.data, bytes);
    if (send) {
      if (slotsOnHost_) copyBytes(out.data, in.data, bytes);  // slot to slot: no device involved
      else dev_->copy(out.data, in.data, bytes);
    }
  } else {
    dev_->copy(out.data, local, bytes);
  }
  if (Status s = dev_->sync(ctx_.waiter->deadline()); !s)
    return std::move(s).withContext(fmt::format("{} #{} ({}): rank {} at step {} ({}, {} bytes)",
                                                collectiveName(op_.coll), op_.seq, algoName_, ctx_.rank, steps_,
                                                stepKind(), bytes));
  return Status::ok();
}

void Primitives::deviceCopy(void* dst, const void* src, size_t bytes) const { dev_->copy(dst, src, bytes); }

void Primitives::deviceDivide(void* data, size_t n) const { dev_->divide(data, n, op_.dtype, divisor_); }

Status Primitives::copyNow(void* dst, const void* src, size_t bytes) {
  if (!bytes || sizesOnly_) return Status::ok();
  if (!dev_) {
    copyBytes(dst, src, bytes);
    return Status::ok();
  }
  dev_->copy(dst, src, bytes);
  return dev_->sync(ctx_.waiter->deadline());
}

}  // namespace zcoll
