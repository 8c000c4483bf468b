// direct_scatter.cpp - scatter: the root sends each rank its block directly, one chunk per rank per
// round; the root sends (N-1) blocks, the others receive one.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DirectScatter final : public AlgorithmOf<Collective::Scatter> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank, root = op.root;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), block = op.count;
    if (r == root) prims.copy(recv, send + static_cast<size_t>(root) * block * es, block);
    return forChunks(0, block, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      if (r != root) return prims.recv(root, recv + o * es, c);
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(root + k, n);
        if (Status s = prims.send(peer, send + (static_cast<size_t>(peer) * block + o) * es, c); !s) return s;
      }
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(directScatter, DirectScatter, "direct")

}  // namespace zcoll
