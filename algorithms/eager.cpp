// eager.cpp - the eager schedules, for small host operations: one round, in which every rank sends
// its contribution straight to each rank that needs it, and a rank that needs several contributions
// takes them all and combines them in rank order (0, 1, ..., N-1), so every rank computes the same
// bits. No dependency chain between ranks: an op costs one hop plus the slowest rank's own work,
// where the latency algorithms (rd, tree) chain log2 N hops and, on an oversubscribed host, the
// context switches that come with each. Each rank sends up to N-1 messages of the whole payload, so
// it is for small payloads only: the selector picks it below ZCOLL_EAGER_BYTES (registry.cpp).
//
// It runs without Primitives: a 2-rank 8-byte op spends most of its time in the call path, not in
// moving the bytes. Payloads larger than a chunk (a forced ZCOLL_ALGO=eager) go in chunk rounds;
// a rank is never more than one round ahead of a peer it receives from, so two slots per FIFO
// suffice (docs/algorithms.md). Host buffers only: device operations use the other algorithms.
#include <algorithm>
#include <array>
#include <bit>

#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

constexpr int kMaxRanks = 64;            // chunks held at once by a rank that combines (one per peer)
constexpr size_t kStackAccBytes = 1024;  // an accumulator this small lives on the stack

// One rank's part in one eager op.
class EagerOp {
 public:
  EagerOp(const OpArgs& op, AlgoContext& ctx, std::string_view algo)
      : op_(op), ctx_(ctx), t_(ctx.transport), algo_(algo), es_(dataTypeSize(op.dtype)) {}

  Status run() {
    const size_t block = op_.count * es_;
    if (ctx_.nranks == 1 || block == 0) return alone(block);
    switch (op_.coll) {
      case Collective::Broadcast: return broadcast(block);
      case Collective::AllGather: return allGather(block);
      case Collective::AllReduce: return allReduce(block);
      case Collective::Reduce: return reduce(block);
      case Collective::ReduceScatter: return reduceScatter(block);
      default: return internalError("eager: no schedule for {}", collectiveName(op_.coll));
    }
  }

 private:
  // The five schedules.
  Status broadcast(size_t block) {
    const auto [send, recv] = bytesOf(op_);
    const int root = op_.root;
    if (ctx_.rank == root && send != recv) copyBytes(recv, send, block);
    return rounds(block, [&](size_t off, size_t len) -> Status {
      if (ctx_.rank != root) return receive(root, len, recv + off);
      for (int k = 1; k < ctx_.nranks; ++k)
        if (Status s = this->send(shift(root, k), send + off, len); !s) return s;
      return Status::ok();
    });
  }

  Status allGather(size_t block) {
    const auto [send, recv] = bytesOf(op_);
    const int n = ctx_.nranks, r = ctx_.rank;
    if (send != recv + r * block) copyBytes(recv + r * block, send, block);
    return rounds(block, [&](size_t off, size_t len) -> Status {
      for (int k = 1; k < n; ++k)
        if (Status s = this->send(shift(r, k), send + off, len); !s) return s;
      for (int k = 1; k < n; ++k) {
        const int q = shift(r, n - k);
        if (Status s = receive(q, len, recv + q * block + off); !s) return s;
      }
      return Status::ok();
    });
  }

  Status allReduce(size_t block) {
    const auto [send, recv] = bytesOf(op_);
    return rounds(block, [&](size_t off, size_t len) -> Status {
      for (int k = 1; k < ctx_.nranks; ++k)
        if (Status s = this->send(shift(ctx_.rank, k), send + off, len); !s) return s;
      return combine(send + off, recv + off, len);
    });
  }

  Status reduce(size_t block) {
    const auto [send, recv] = bytesOf(op_);
    return rounds(block, [&](size_t off, size_t len) -> Status {
      return ctx_.rank == op_.root ? combine(send + off, recv + off, len) : this->send(op_.root, send + off, len);
    });
  }

  Status reduceScatter(size_t block) {
    const auto [send, recv] = bytesOf(op_);
    const int r = ctx_.rank;
    return rounds(block, [&](size_t off, size_t len) -> Status {
      for (int k = 1; k < ctx_.nranks; ++k) {
        const int p = shift(r, k);
        if (Status s = this->send(p, send + p * block + off, len); !s) return s;
      }
      return combine(send + r * block + off, recv + off, len);
    });
  }

  // One rank: the result is this rank's own contribution.
  Status alone(size_t block) {
    const auto [send, recv] = bytesOf(op_);
    const bool result = op_.coll != Collective::Reduce || ctx_.rank == op_.root;
    if (!result || block == 0) return Status::ok();
    if (send != recv) copyBytes(recv, send, block);
    if (reduces()) finalize(recv, elems(block));
    return Status::ok();
  }

  // No division on an op's path (a 64-bit division is a visible share of an 8-byte op).
  int shift(int rank, int k) const {  // (rank + k) mod N, for 0 <= k < N
    const int q = rank + k;
    return q >= ctx_.nranks ? q - ctx_.nranks : q;
  }
  size_t elems(size_t bytes) const { return bytes >> std::countr_zero(es_); }

  bool reduces() const { return traits(op_.coll).reduces; }

  void finalize(void* data, size_t n) const {
    if (FinalizeFn f = finalizeFunction(op_.dtype, op_.op))
      f(data, n, ctx_.avgDivisor > 0 ? ctx_.avgDivisor : ctx_.nranks);
  }

  template <typename F>
  Status rounds(size_t block, F&& f) {
    const size_t chunk = ctx_.chunkBytes & ~(es_ - 1);  // whole elements (sizes are powers of two)
    if (chunk == 0) return internalError("eager: chunk of {} bytes holds no {}-byte element", ctx_.chunkBytes, es_);
    for (size_t off = 0; off < block; off += chunk)
      if (Status s = f(off, std::min(chunk, block - off)); !s) return s;
    return Status::ok();
  }

  Status send(int peer, const void* src, size_t bytes) {
    SendSlot slot;
    const WaitResult w = ctx_.waiter->until([&] { return t_->tryAcquireSendFor(peer, bytes, &slot); },
                                            [&] { return t_->peerExited(peer) ? peer : -1; }, t_, peer);
    if (w != WaitResult::Ready) return failure(w, "waiting for FIFO room at", peer);
    copyBytes(slot.data, src, bytes);
    t_->commitSend(peer, bytes);
    return Status::ok();
  }

  // Waits for peer's next chunk, of `bytes` (the caller releases it).
  Status take(int peer, size_t bytes, RecvChunk* in) {
    const WaitResult w = ctx_.waiter->until([&] { return t_->tryRecv(peer, in); },
                                            [&] { return t_->peerExited(peer) ? peer : -1; }, t_, peer);
    if (w != WaitResult::Ready) return failure(w, "waiting for data from", peer);
    if (in->bytes != bytes) return chunkSizeMismatch(op_, algo_, ctx_.rank, in->bytes, peer, bytes);
    return Status::ok();
  }

  Status receive(int peer, size_t bytes, void* dst) {
    RecvChunk in;
    if (Status s = take(peer, bytes, &in); !s) return s;
    copyBytes(dst, in.data, bytes);
    t_->releaseRecv(peer);
    return Status::ok();
  }

  // dst = the N contributions combined in rank order, finalized: mine is this rank's, the others come
  // from the peers. dst is written by the last step only, so mine may be dst (in place).
  Status combine(const void* mine, void* dst, size_t bytes) {
    const int n = ctx_.nranks, r = ctx_.rank;
    if (n > kMaxRanks) return internalError("eager: {} ranks, at most {}", n, kMaxRanks);
    std::array<const void*, kMaxRanks> part;
    part[static_cast<size_t>(r)] = mine;
    int held = 0;
    Status s;
    for (int q = 0; q < n && s; ++q) {
      if (q == r) continue;
      RecvChunk in;
      s = take(q, bytes, &in);
      if (!s) break;
      part[static_cast<size_t>(q)] = in.data;
      ++held;
    }
    if (s) {
      const size_t elems = this->elems(bytes);
      const ReduceFn reduce = reduceFunction(op_.dtype, op_.op);
      alignas(64) char stackAcc[kStackAccBytes];
      void* acc = dst;
      if (n > 2) acc = bytes <= kStackAccBytes ? stackAcc : ctx_.scratch ? ctx_.scratch->get(bytes) : nullptr;
      if (!acc) {
        s = systemError(fmt::format("eager: a {}-byte accumulator", bytes), ENOMEM);
      } else {
        reduce(n == 2 ? dst : acc, part[0], part[1], elems);
        for (int q = 2; q < n; ++q) reduce(q == n - 1 ? dst : acc, acc, part[static_cast<size_t>(q)], elems);
        finalize(dst, elems);
      }
    }
    // Release what was taken, in rank order (each FIFO's next chunk).
    for (int q = 0; q < n && held > 0; ++q)
      if (q != r) {
        t_->releaseRecv(q);
        --held;
      }
    return s;
  }

  Status failure(WaitResult w, std::string_view what, int peer) const {
    return waitFailure(w,
                       fmt::format("{} #{} ({}, {} x {}): rank {} {} rank {}", collectiveName(op_.coll), op_.seq, algo_,
                                   op_.count, dataTypeName(op_.dtype), ctx_.rank, what, peer),
                       peer, ctx_);
  }

  const OpArgs& op_;
  AlgoContext& ctx_;
  Transport* t_;
  std::string_view algo_;
  size_t es_;
};

template <Collective C>
class Eager final : public AlgorithmOf<C> {
 public:
  using AlgorithmOf<C>::AlgorithmOf;

  Status supports(int nranks) const override {
    if (nranks > kMaxRanks) return notSupported("{} ranks: eager combines at most {}", nranks, kMaxRanks);
    return Status::ok();
  }
  bool eager() const override { return true; }
  bool servesDevice() const override { return false; }

  // One step; the busiest rank sends (broadcast's and reduce's root: takes) N-1 copies of the
  // payload and, where it combines, reads N-1 more (the call path it saves is not in the model).
  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n), payload = traits(op.coll).perRankBlocks ? s / n : s;
    const double passes = C == Collective::Broadcast ? 1.0 : 2.0;
    return m.alpha + std::max(0, n - 2) * m.message + passes * std::max(0, n - 1) * payload * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    if (ctx.device)
      return notSupported("{} (eager): host buffers only; device buffers go to the other algorithms",
                          collectiveName(op.coll));
    return EagerOp(op, ctx, this->name()).run();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(eagerAllReduce, Eager<Collective::AllReduce>, "eager")
ZCOLL_ALGORITHM_FACTORY(eagerReduceScatter, Eager<Collective::ReduceScatter>, "eager")
ZCOLL_ALGORITHM_FACTORY(eagerReduce, Eager<Collective::Reduce>, "eager")
ZCOLL_ALGORITHM_FACTORY(eagerAllGather, Eager<Collective::AllGather>, "eager")
ZCOLL_ALGORITHM_FACTORY(eagerBroadcast, Eager<Collective::Broadcast>, "eager")

}  // namespace zcoll
