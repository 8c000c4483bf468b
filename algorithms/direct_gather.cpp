// direct_gather.cpp - gather: every rank sends its block straight to the root, which takes one chunk
// from each rank per round. The root receives (N-1) blocks; no other rank forwards anything.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DirectGather final : public AlgorithmOf<Collective::Gather> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank, root = op.root;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), block = op.count;
    if (r == root) prims.copy(recv + static_cast<size_t>(root) * block * es, send, block);
    return forChunks(0, block, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      if (r != root) return prims.send(root, send + o * es, c);
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(root + k, n);
        if (Status s = prims.recv(peer, recv + (static_cast<size_t>(peer) * block + o) * es, c); !s) return s;
      }
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(directGather, DirectGather, "direct")

}  // namespace zcoll
