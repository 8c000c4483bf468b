// rhd.hpp - pure arithmetic of recursive halving-doubling (Rabenseifner), with the folding of
// non-power-of-two rank counts: with p = the largest power of two <= N and rem = N - p, the first
// 2*rem ranks pair up; the even one of each pair hands its data to the odd one and sits out, so p
// ranks run the power-of-two algorithm under "virtual" ranks 0..p-1.
#pragma once

#include <cstddef>

namespace zcoll::patterns {

constexpr int largestPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}
constexpr bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }
constexpr int log2Floor(int n) {
  int l = 0;
  while ((1 << (l + 1)) <= n) ++l;
  return l;
}

struct Fold {
  int nranks = 1;
  int p = 1;    // participants
  int rem = 0;  // folded pairs

  static constexpr Fold of(int n) { return {n, largestPowerOfTwo(n), n - largestPowerOfTwo(n)}; }
  // Even ranks of the first 2*rem hand their data to rank + 1 and sit out.
  constexpr bool sitsOut(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  constexpr bool absorbs(int rank) const { return rank < 2 * rem && rank % 2 == 1; }
  // Virtual rank in [0, p) of a participant, and back.
  constexpr int virtualRank(int rank) const { return rank < 2 * rem ? rank / 2 : rank - rem; }
  constexpr int realRank(int vrank) const { return vrank < rem ? vrank * 2 + 1 : vrank + rem; }
};

// Element range [lo, hi) of a halving step.
struct Range {
  size_t lo = 0;
  size_t hi = 0;
  size_t size() const { return hi - lo; }
};

// At a halving step with distance `dist` (a power of two), the rank keeps the lower half of its
// current range if (vrank & dist) == 0, the upper half otherwise; it sends the other half.
// Split points are at element granularity, in units of `unit` elements (1, or the block size when
// whole blocks must stay together).
struct HalvingStep {
  Range keep;
  Range give;
};
constexpr HalvingStep halve(Range cur, int vrank, int dist, size_t unit) {
  size_t units = (cur.hi - cur.lo) / unit;
  size_t mid = cur.lo + (units / 2) * unit;
  Range lower{cur.lo, mid}, upper{mid, cur.hi};
  return (vrank & dist) == 0 ? HalvingStep{lower, upper} : HalvingStep{upper, lower};
}

}  // namespace zcoll::patterns
