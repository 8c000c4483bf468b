// tree_reduce.cpp - pipelined binary tree reduce to any root: log2 N hops per chunk. recvbuf is only
// valid at the root, so inner nodes with two children keep their partial chunk in scratch.
#include <cerrno>

#include "algorithms/algorithm.hpp"
#include "algorithms/tree_steps.hpp"

namespace zcoll {
namespace {

class TreeReduce final : public AlgorithmOf<Collective::Reduce> {
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
    char* tmp = nullptr;
    if (node.parent >= 0 && node.nchildren == 2) {
      tmp = static_cast<char*>(ctx.scratch->get(prims.chunkElems() * es));
      if (!tmp) return systemError("reduce (tree): mapping its scratch", ENOMEM);
    }
    return forChunks(0, op.count, prims.chunkElems(), [&](size_t o, size_t c) {
      return treeReduceUp(prims, node, send + o * es, recv ? recv + o * es : nullptr, tmp, c);
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(treeReduce, TreeReduce, "tree")

}  // namespace zcoll
