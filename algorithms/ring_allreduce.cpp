// ring_allreduce.cpp - bandwidth-optimal ring all-reduce: reduce-scatter then all-gather, fused per
// chunk round (NCCL's schedule). Each rank sends 2(N-1)/N of the buffer; 2(N-1) steps per round.
//
// Per round, for the chunk at the same offset in every block (pattern helpers in patterns/ring.hpp):
//   step 0            send               block r
//   steps 1..N-2      recvReduceSend     block r-s
//   step N-1          recvReduceCopySend block r+1 (now final: written to recvbuf and sent on)
//   steps 1..N-2      recvCopySend       block r+1-t
//   step N-1          recv               block r+2
// All reads of sendbuf in a round happen before its writes, so in-place is safe.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class RingAllReduce final : public AlgorithmOf<Collective::AllReduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    // A round's chunk of every block passes all 2(N-1) steps before the next round's starts.
    return 2.0 * (n - 1) * m.rounds(s / n) * m.alpha + 2.0 * (n - 1) / n * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize();
    if (n == 1) {
      prims.reduceAlone(recv, send, op.count);
      return Status::ok();
    }
    const int next = patterns::ringNext(r, n), prev = patterns::ringPrev(r, n);
    const patterns::BlockPartition parts{op.count, n};
    const size_t chunk = prims.chunkElems();
    const size_t rounds = patterns::chunkRounds(parts.maxSize(), chunk);
    // Byte offset and length of this round's chunk of `block`.
    auto at = [&](int block, size_t round, size_t* len) {
      patterns::ChunkSpan c = patterns::chunkOf(parts.size(block), chunk, round);
      *len = c.n;
      return (parts.offset(block) + c.begin) * es;
    };
    for (size_t round = 0; round < rounds; ++round) {
      size_t len = 0, off = at(patterns::allReduceSendBlock(r, 0, n), round, &len);
      if (Status s = prims.send(next, send + off, len); !s) return s;
      for (int step = 1; step < n - 1; ++step) {
        off = at(patterns::allReduceSendBlock(r, step, n), round, &len);
        if (Status s = prims.recvReduceSend(prev, next, send + off, len); !s) return s;
      }
      off = at(patterns::allReduceOwnedBlock(r, n), round, &len);
      if (Status s = prims.recvReduceCopySend(prev, next, send + off, recv + off, len, true); !s) return s;
      for (int step = 1; step < n - 1; ++step) {
        off = at(patterns::allReduceGatherBlock(r, step, n), round, &len);
        if (Status s = prims.recvCopySend(prev, next, recv + off, len); !s) return s;
      }
      off = at(patterns::allReduceGatherBlock(r, n - 1, n), round, &len);
      if (Status s = prims.recv(prev, recv + off, len); !s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(ringAllReduce, RingAllReduce, "ring")

}  // namespace zcoll
