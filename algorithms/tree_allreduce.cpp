// tree_allreduce.cpp - pipelined double binary tree all-reduce (NCCL's shape): each chunk is split in
// two halves, reduced up and broadcast down two trees whose inner nodes are mostly leaves of the
// other, so both halves move at once and every rank carries about one half up and one down.
// ~2 log2 N hops of latency per chunk: the latency-bound choice at larger rank counts.
#include "algorithms/algorithm.hpp"
#include "algorithms/tree_steps.hpp"

namespace zcoll {
namespace {

class TreeAllReduce final : public AlgorithmOf<Collective::AllReduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    // Each chunk goes up to the root and back before the next (2 log2(N+1) hops a round; a node with
    // two children takes two messages a hop).
    return 2.0 * CostModel::log2Ceil(n + 1) * m.rounds(s) * (m.alpha + m.message) + 2.0 * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize();
    const patterns::TreeNode trees[2] = {patterns::binaryTree(r, 0, n, false), patterns::binaryTree(r, 0, n, true)};
    return forChunks(0, op.count, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      const size_t half[2] = {c / 2, c - c / 2};
      const size_t at[2] = {o * es, (o + half[0]) * es};
      for (int t = 0; t < 2; ++t)
        if (half[t])
          if (Status s = treeReduceUp(prims, trees[t], send + at[t], recv + at[t], recv + at[t], half[t]); !s)
            return s;
      for (int t = 0; t < 2; ++t)
        if (half[t])
          if (Status s = treeBroadcastDown(prims, trees[t], recv + at[t], half[t]); !s) return s;
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(treeAllReduce, TreeAllReduce, "tree")

}  // namespace zcoll
