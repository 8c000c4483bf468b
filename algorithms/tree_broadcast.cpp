// tree_broadcast.cpp - pipelined binary tree broadcast from any root: log2 N hops per chunk instead
// of the chain's N-1, at the cost of inner nodes sending each chunk twice.
#include "algorithms/algorithm.hpp"
#include "algorithms/tree_steps.hpp"

namespace zcoll {
namespace {

class TreeBroadcast final : public AlgorithmOf<Collective::Broadcast> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return CostModel::log2Ceil(n + 1) * m.alpha + 2.0 * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize();
    const patterns::TreeNode node = patterns::binaryTree(ctx.rank, op.root, ctx.nranks);
    const bool root = ctx.rank == op.root;
    return forChunks(0, op.count, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      // The root sends from sendbuff, then copies the chunk while its children take it.
      Status s = treeBroadcastDown(prims, node, recv + o * es, c, root ? send + o * es : nullptr);
      if (root) prims.copy(recv + o * es, send + o * es, c);
      return s;
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(treeBroadcast, TreeBroadcast, "tree")

}  // namespace zcoll
