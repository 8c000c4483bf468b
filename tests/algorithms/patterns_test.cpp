// patterns_test.cpp - the pure pattern arithmetic of algorithms/patterns/: ring, hosts, recursive
// halving-doubling, binary trees.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "algorithms/cost_model.hpp"
#include "algorithms/patterns/hosts.hpp"
#include "algorithms/primitives.hpp"
#include "algorithms/patterns/rhd.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/patterns/tree.hpp"

namespace zcoll::patterns {
namespace {

TEST(Ring, Neighbours) {
  EXPECT_EQ(ringNext(0, 1), 0);
  EXPECT_EQ(ringPrev(0, 1), 0);
  EXPECT_EQ(ringNext(3, 4), 0);
  EXPECT_EQ(ringPrev(0, 4), 3);
  EXPECT_EQ(mod(-7, 3), 2);
  // Every branch of mod (within one n of the range, and far from it) against the definition.
  for (int n : {1, 2, 3, 7, 8})
    for (int64_t a = -5 * n; a <= 5 * n; ++a) EXPECT_EQ(mod(a, n), ((a % n) + n) % n) << a << " mod " << n;
}

TEST(BlockPartition, CoversEveryElementOnce) {
  for (size_t count : {0, 1, 5, 7, 8, 100, 1001}) {
    for (int n : {1, 2, 3, 4, 5, 7, 8}) {
      BlockPartition p{count, n};
      size_t expectOffset = 0, maxSize = 0;
      for (int b = 0; b < n; ++b) {
        EXPECT_EQ(p.offset(b), expectOffset) << count << "/" << n << " block " << b;
        expectOffset += p.size(b);
        maxSize = std::max(maxSize, p.size(b));
        if (b > 0) {
          EXPECT_LE(p.size(b), p.size(b - 1));
        }
        EXPECT_LE(p.size(0) - p.size(b), 1u);
      }
      EXPECT_EQ(expectOffset, count);
      EXPECT_EQ(p.maxSize(), maxSize);
    }
  }
}

TEST(Chunks, SpanAndRounds) {
  EXPECT_EQ(chunkRounds(0, 4), 0u);
  EXPECT_EQ(chunkRounds(9, 4), 3u);
  EXPECT_EQ(chunkRounds(1, 4), 1u);  // one chunk or less: no division
  EXPECT_EQ(chunkRounds(4, 4), 1u);
  EXPECT_EQ(chunkRounds(5, 4), 2u);
  EXPECT_EQ(chunkRounds(8, 4), 2u);
  ChunkSpan c = chunkOf(9, 4, 2);
  EXPECT_EQ(c.begin, 8u);
  EXPECT_EQ(c.n, 1u);
  EXPECT_EQ(chunkOf(9, 4, 3).n, 0u);
  EXPECT_EQ(chunkOf(3, 4, 1).n, 0u);
}

// Every step's send on rank r must be the receive of rank r+1 at the next step, and the owned block
// and the gathered ones must cover all blocks exactly once.
TEST(RingSchedules, AllReduceMatchesNeighbours) {
  for (int n = 2; n <= 9; ++n) {
    for (int r = 0; r < n; ++r) {
      int right = ringNext(r, n);
      // In the reduce-scatter phase, right reduces at step s the block r sent at step s-1.
      for (int s = 1; s < n; ++s) EXPECT_EQ(allReduceSendBlock(r, s - 1, n), allReduceSendBlock(right, s, n));
      EXPECT_EQ(allReduceOwnedBlock(r, n), mod(r - (n - 1), n));
      std::set<int> blocks = {allReduceOwnedBlock(r, n)};
      for (int t = 1; t < n; ++t) blocks.insert(allReduceGatherBlock(r, t, n));
      EXPECT_EQ(static_cast<int>(blocks.size()), n);
      // In the gather phase, r receives at step t what its left neighbour had at step t-1.
      int left = ringPrev(r, n);
      for (int t = 1; t < n; ++t)
        EXPECT_EQ(allReduceGatherBlock(r, t, n),
                  t == 1 ? allReduceOwnedBlock(left, n) : allReduceGatherBlock(left, t - 1, n));
    }
  }
}

TEST(RingSchedules, ReduceScatterEndsWithOwnBlock) {
  for (int n = 2; n <= 9; ++n) {
    for (int r = 0; r < n; ++r) {
      int left = ringPrev(r, n);
      // At step s >= 1, r receives the block its left neighbour sent at step s-1, and reduces block
      // reduceScatterBlock(r, s) into it: they must be the same block.
      for (int s = 1; s < n; ++s) EXPECT_EQ(reduceScatterBlock(left, s - 1, n), reduceScatterBlock(r, s, n));
      EXPECT_EQ(reduceScatterBlock(r, n - 1, n), r);
    }
  }
}

TEST(RingSchedules, AllGatherCoversAll) {
  for (int n = 1; n <= 9; ++n) {
    for (int r = 0; r < n; ++r) {
      std::set<int> got;
      for (int s = 0; s < n; ++s) got.insert(allGatherBlock(r, s, n));
      EXPECT_EQ(static_cast<int>(got.size()), n);
      for (int s = 1; s < n; ++s) EXPECT_EQ(allGatherBlock(ringPrev(r, n), s - 1, n), allGatherBlock(r, s, n));
    }
  }
}

TEST(Chain, Positions) {
  EXPECT_EQ(chainPosition(2, 2, 5), 0);
  EXPECT_EQ(chainPosition(1, 2, 5), 4);
  EXPECT_EQ(chainPosition(0, 3, 4), 1);
}


TEST(HostLayout, HostsInOrderOfTheirLowestRank) {
  using zcoll::patterns::HostLayout;
  // Ranks 0, 2, 4 on host A; 1, 3, 5 on host B (interleaved launch order).
  HostLayout l = HostLayout::fromHostIds({7, 9, 7, 9, 7, 9});
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.perHost, 3);
  EXPECT_EQ(l.hostOf, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(l.localIndex, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(l.members[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(l.members[1], (std::vector<int>{1, 3, 5}));
  ASSERT_EQ(l.columns.size(), 3u);
  EXPECT_EQ(l.columns[1], (std::vector<int>{2, 3}));
  // Each rank's place in its column is its host: what the across-host phase runs with.
  for (int r = 0; r < 6; ++r) EXPECT_EQ(l.columns[l.localIndex[r]][l.hostOf[r]], r);
}

TEST(HostLayout, UnevenHostsHaveNoColumns) {
  using zcoll::patterns::HostLayout;
  HostLayout l = HostLayout::fromHostIds({1, 1, 1, 2});
  EXPECT_EQ(l.hosts, 2);
  EXPECT_EQ(l.perHost, 0);
  EXPECT_TRUE(l.columns.empty());
  HostLayout one = HostLayout::fromHostIds({5, 5, 5});
  EXPECT_EQ(one.hosts, 1);
  EXPECT_EQ(one.perHost, 3);
  HostLayout each = HostLayout::fromHostIds({1, 2, 3});
  EXPECT_EQ(each.hosts, 3);
  EXPECT_EQ(each.perHost, 1);
}

// Recursive halving-doubling (rhd.hpp): the fold of non-powers of two, virtual ranks, halving.
TEST(Rhd, PowersOfTwoAndLogs) {
  EXPECT_EQ(largestPowerOfTwo(1), 1);
  EXPECT_EQ(largestPowerOfTwo(7), 4);
  EXPECT_EQ(largestPowerOfTwo(8), 8);
  EXPECT_EQ(largestPowerOfTwo(3000), 2048);
  EXPECT_TRUE(isPowerOfTwo(1));
  EXPECT_TRUE(isPowerOfTwo(4096));
  EXPECT_FALSE(isPowerOfTwo(0));
  EXPECT_FALSE(isPowerOfTwo(6));
  EXPECT_EQ(log2Floor(1), 0);
  EXPECT_EQ(log2Floor(5), 2);
  EXPECT_EQ(log2Floor(16384), 14);
}

TEST(Rhd, FoldMapsParticipantsOntoVirtualRanksOneToOne) {
  for (int n = 1; n <= 67; ++n) {
    const Fold f = Fold::of(n);
    EXPECT_EQ(f.p + f.rem, n);
    std::vector<int> seen(static_cast<size_t>(f.p), 0);
    int out = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_FALSE(f.sitsOut(r) && f.absorbs(r)) << n << " " << r;
      if (f.sitsOut(r)) {
        ++out;
        EXPECT_TRUE(f.absorbs(r + 1)) << "the partner of " << r << " of " << n;
        continue;
      }
      const int v = f.virtualRank(r);
      ASSERT_GE(v, 0);
      ASSERT_LT(v, f.p);
      ++seen[static_cast<size_t>(v)];
      EXPECT_EQ(f.realRank(v), r) << n;
    }
    EXPECT_EQ(out, f.rem) << n;
    for (int c : seen) EXPECT_EQ(c, 1) << n;
  }
}

TEST(Rhd, HalvingKeepsAndGivesComplementaryHalvesThatPartnersMirror) {
  for (size_t unit : {size_t{1}, size_t{3}}) {
    const Range all{0, 1000 * unit + (unit == 1 ? 7 : 0)};
    for (int p : {2, 4, 8, 16}) {
      // Every virtual rank halves down to its own piece; the pieces tile the range exactly.
      std::vector<int> owner(all.hi, -1);
      for (int v = 0; v < p; ++v) {
        Range cur = all;
        for (int dist = p / 2; dist >= 1; dist /= 2) {
          const HalvingStep mine = halve(cur, v, dist, unit);
          const HalvingStep theirs = halve(cur, v ^ dist, dist, unit);
          EXPECT_EQ(mine.keep.lo, theirs.give.lo);  // the partner sends what this rank keeps
          EXPECT_EQ(mine.keep.hi, theirs.give.hi);
          EXPECT_EQ(mine.keep.size() + mine.give.size(), cur.size());
          EXPECT_EQ(mine.keep.lo == cur.lo ? mine.keep.hi : mine.keep.lo,
                    mine.keep.lo == cur.lo ? mine.give.lo : mine.give.hi);
          if (unit > 1) {
            EXPECT_EQ((mine.keep.lo - all.lo) % unit, 0u);
          }
          cur = mine.keep;
        }
        for (size_t i = cur.lo; i < cur.hi; ++i) {
          EXPECT_EQ(owner[i], -1);
          owner[i] = v;
        }
      }
      for (size_t i = 0; i < all.hi; ++i) ASSERT_NE(owner[i], -1) << "element " << i << ", p " << p;
    }
  }
}

// Binary trees (tree.hpp): one root, every other rank a child of exactly its parent, depth
// ceil(log2(n + 1)), and the mirror tree relabels the same shape.
TEST(Tree, EveryRankHasOneParentAndTheEdgesAgree) {
  for (int n = 1; n <= 40; ++n)
    for (int root : {0, n / 2, n - 1})
      for (bool mirror : {false, true}) {
        int roots = 0;
        std::vector<int> childOf(static_cast<size_t>(n), 0);
        for (int r = 0; r < n; ++r) {
          const TreeNode t = binaryTree(r, root, n, mirror);
          if (t.parent < 0) {
            ++roots;
            EXPECT_EQ(r, root);
          } else {
            const TreeNode up = binaryTree(t.parent, root, n, mirror);
            EXPECT_TRUE(up.children[0] == r || (up.nchildren == 2 && up.children[1] == r))
                << "n " << n << " root " << root << " rank " << r;
          }
          for (int c = 0; c < t.nchildren; ++c) {
            ++childOf[static_cast<size_t>(t.children[c])];
            EXPECT_EQ(binaryTree(t.children[c], root, n, mirror).parent, r);
          }
          // Depth: walk up to the root in at most floor(log2(n)) steps.
          int depth = 0;
          for (int a = r; binaryTree(a, root, n, mirror).parent >= 0; a = binaryTree(a, root, n, mirror).parent)
            ASSERT_LE(++depth, log2Floor(n)) << n;
        }
        EXPECT_EQ(roots, 1);
        for (int r = 0; r < n; ++r) EXPECT_EQ(childOf[static_cast<size_t>(r)], r == root ? 0 : 1) << n << " " << r;
      }
}

TEST(Tree, MirrorMakesMostLeavesInnerNodes) {
  const int n = 32;
  int leavesInBoth = 0;
  for (int r = 0; r < n; ++r)
    if (binaryTree(r, 0, n).nchildren == 0 && binaryTree(r, 0, n, true).nchildren == 0) ++leavesInBoth;
  EXPECT_LE(leavesInBoth, 3);  // of 16 leaves per tree: the mirror relabels them onto inner nodes
}

}  // namespace
}  // namespace zcoll::patterns

namespace zcoll {
namespace {

// exchangeChunks sends at most `window` chunks ahead of the one it awaits, each chunk before the one at
// its offset comes in (rd's in-place steps), every chunk once and in order, for mirrored and unequal
// counts (rhd's halves differ by an element).
TEST(Exchange, SendsAheadWithinTheWindowAndEachChunkBeforeItsReply) {
  for (int window : {1, 2, 4})
    for (auto [sendCount, recvCount] : {std::pair<size_t, size_t>{0, 0}, {5, 5}, {40, 40}, {40, 17}, {17, 40}, {0, 9}}) {
      std::vector<std::pair<char, size_t>> events;  // ('s' | 'r', offset)
      ASSERT_TRUE(exchangeChunks(sendCount, recvCount, 4, window,
                                 [&](size_t o, size_t n) {
                                   EXPECT_EQ(n, std::min<size_t>(4, sendCount - o));
                                   events.push_back({'s', o});
                                   return Status::ok();
                                 },
                                 [&](size_t o, size_t n) {
                                   EXPECT_EQ(n, std::min<size_t>(4, recvCount - o));
                                   events.push_back({'r', o});
                                   return Status::ok();
                                 })
                      .isOk());
      size_t sent = 0, received = 0;
      for (const auto& [kind, offset] : events) {
        if (kind == 's') {
          EXPECT_EQ(offset, sent * 4);
          ++sent;
          if (received < (recvCount + 3) / 4) {  // while a chunk is awaited (after the last, the rest goes out)
            EXPECT_LE(sent, received + static_cast<size_t>(window)) << "window " << window;
          }
        } else {
          EXPECT_EQ(offset, received * 4);
          ++received;
          if (offset < sendCount) {
            EXPECT_GT(sent * 4, offset) << "chunk at " << offset << " came in before it left";
          }
        }
      }
      EXPECT_EQ(sent, (sendCount + 3) / 4);
      EXPECT_EQ(received, (recvCount + 3) / 4);
    }
}

TEST(CostModel, ChunkRoundsAndBlockHosts) {
  CostModel m;
  EXPECT_EQ(m.rounds(1e9), 1.0);  // slot size unknown: one round
  m.chunkBytes = 256 * 1024;
  EXPECT_EQ(m.rounds(1), 1.0);
  EXPECT_EQ(m.rounds(256 * 1024), 1.0);
  EXPECT_EQ(m.rounds(256 * 1024 + 1), 2.0);
  auto layout = [](std::vector<uint64_t> ids) { return patterns::HostLayout::fromHostIds(ids); };
  EXPECT_TRUE(patterns::blockHosts(layout({0, 0, 1, 1, 2, 2, 3, 3})));
  EXPECT_FALSE(patterns::blockHosts(layout({0, 1, 0, 1})));           // round-robin
  EXPECT_FALSE(patterns::blockHosts(layout({0, 0, 0, 1, 1, 1})));     // 3 a host: not a power of two
  EXPECT_FALSE(patterns::blockHosts(layout({0, 0, 0, 0})));           // one host
}

}  // namespace
}  // namespace zcoll
