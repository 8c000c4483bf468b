// direct_alltoall.cpp - all-to-all: per chunk round each rank sends every peer its block (in shift
// order r+1, r+2, ...) then receives every peer's block for it. One step per round, N-1 messages in
// flight; a rank can be at most one round ahead of a peer, so >= 2 slots never deadlock.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DirectAllToAll final : public AlgorithmOf<Collective::AllToAll> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), block = op.count;
    auto at = [&](int b, size_t o) { return (static_cast<size_t>(b) * block + o) * es; };
    prims.copy(recv + at(r, 0), send + at(r, 0), block);
    return forChunks(0, block, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r + k, n);
        if (Status s = prims.send(peer, send + at(peer, o), c); !s) return s;
      }
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r - k, n);
        if (Status s = prims.recv(peer, recv + at(peer, o), c); !s) return s;
      }
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(directAllToAll, DirectAllToAll, "direct")

}  // namespace zcoll
