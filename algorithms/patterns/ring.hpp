// ring.hpp - pure ring arithmetic shared by every ring-shaped algorithm (host and, later, device).
//
// Nothing here touches memory or a transport: each function is a few integer operations with its
// own unit test (tests/algorithms/patterns_test.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace zcoll::patterns {

// a mod n in [0, n). Ring arithmetic asks with a within one n of the range: answered without a
// division (two 64-bit divisions cost ~40 ns, a quarter of a small collective's own time).
constexpr int mod(int64_t a, int n) {
  if (a >= 0 && a < n) return static_cast<int>(a);
  if (a < 0 && a >= -static_cast<int64_t>(n)) return static_cast<int>(a + n);
  if (a >= n && a < 2 * static_cast<int64_t>(n)) return static_cast<int>(a - n);
  return static_cast<int>(((a % n) + n) % n);
}
constexpr int ringNext(int rank, int nranks) { return mod(rank + 1, nranks); }
constexpr int ringPrev(int rank, int nranks) { return mod(rank - 1, nranks); }

// `count` elements split into `nblocks` contiguous blocks whose sizes differ by at most one:
// the first `count % nblocks` blocks hold one element more.
struct BlockPartition {
  size_t count = 0;
  int nblocks = 1;

  size_t base() const { return count / static_cast<size_t>(nblocks); }
  size_t extra() const { return count % static_cast<size_t>(nblocks); }
  size_t size(int block) const { return base() + (static_cast<size_t>(block) < extra() ? 1 : 0); }
  size_t offset(int block) const {
    size_t b = static_cast<size_t>(block);
    return b * base() + std::min(b, extra());
  }
  size_t maxSize() const { return base() + (extra() ? 1 : 0); }
};

// Chunk `round` of a block of `blockSize` elements cut into chunks of `chunk` elements:
// [begin, begin + n) relative to the block; n = 0 once the block is exhausted.
struct ChunkSpan {
  size_t begin = 0;
  size_t n = 0;
};
constexpr ChunkSpan chunkOf(size_t blockSize, size_t chunk, size_t round) {
  size_t begin = round * chunk;
  if (begin >= blockSize) return {blockSize, 0};
  return {begin, std::min(chunk, blockSize - begin)};
}

// A block of at most one chunk (every small op) is answered without a division.
constexpr size_t chunkRounds(size_t largestBlock, size_t chunk) {
  if (largestBlock <= chunk) return largestBlock > 0 ? 1 : 0;
  return (largestBlock + chunk - 1) / chunk;
}

// Position of `rank` in a chain that starts at `root` and follows the ring (root is position 0).
constexpr int chainPosition(int rank, int root, int nranks) { return mod(rank - root, nranks); }

// Ring reduce-scatter as scheduled by ring all-reduce: at step s (0 <= s < nranks - 1) rank r sends
// block (r - s) and receives block (r - s - 1); after the last step it owns block (r + 1).
constexpr int allReduceSendBlock(int rank, int step, int nranks) { return mod(rank - step, nranks); }
constexpr int allReduceOwnedBlock(int rank, int nranks) { return mod(rank + 1, nranks); }
// All-gather phase of ring all-reduce: at step t (1 <= t < nranks) rank r receives block (r + 1 - t).
constexpr int allReduceGatherBlock(int rank, int step, int nranks) { return mod(rank + 1 - step, nranks); }

// Ring reduce-scatter that leaves block r on rank r: at step s rank r sends block (r - 1 - s);
// at step s >= 1 it receives block (r - 1 - s); the last step (s = nranks - 1) receives block r.
constexpr int reduceScatterBlock(int rank, int step, int nranks) { return mod(rank - 1 - step, nranks); }

// Ring all-gather: at step s rank r sends block (r - s) (its own at s = 0) and receives (r - s - 1).
constexpr int allGatherBlock(int rank, int step, int nranks) { return mod(rank - step, nranks); }

}  // namespace zcoll::patterns
