// partition.cpp - see partition.hpp.
#include "partition.hpp"

#include <algorithm>

namespace zcoll::zero {

Partition::Partition(const std::vector<int64_t>& groupNumel, int partitions, int64_t bucketElems,
                     const std::vector<bool>& frozen)
    : partitions_(std::max(partitions, 1)), numel_(groupNumel), flatOffset_(groupNumel.size()),
      unitOf_(groupNumel.size()) {
  const int groups = static_cast<int>(groupNumel.size());
  auto isFrozen = [&](int g) { return static_cast<size_t>(g) < frozen.size() && frozen[static_cast<size_t>(g)]; };
  for (int g = 0; g < groups;) {
    Unit u;
    u.firstGroup = g;
    u.numel = numel_[static_cast<size_t>(g)];
    ++g;
    while (bucketElems > 0 && g < groups && u.numel + numel_[static_cast<size_t>(g)] <= bucketElems &&
           isFrozen(g) == isFrozen(u.firstGroup)) {
      u.numel += numel_[static_cast<size_t>(g)];
      ++g;
    }
    u.endGroup = g;
    u.slice = (u.numel + partitions_ - 1) / partitions_;
    u.padded = u.slice * partitions_;
    u.flatOffset = flatNumel_;
    int64_t at = u.flatOffset;
    for (int k = u.firstGroup; k < u.endGroup; ++k) {
      flatOffset_[static_cast<size_t>(k)] = at;
      unitOf_[static_cast<size_t>(k)] = static_cast<int>(units_.size());
      at += numel_[static_cast<size_t>(k)];
    }
    flatNumel_ += u.padded;
    shardNumel_ += u.slice;
    totalNumel_ += u.numel;
    if (!isFrozen(u.firstGroup)) trainableShardNumel_ += u.slice;
    units_.push_back(u);
  }
  // Shard order: the trainable units' slices, then the frozen ones' (which need no gradient or state).
  int64_t trainable = 0, frozenAt = trainableShardNumel_;
  for (Unit& u : units_) {
    int64_t& next = isFrozen(u.firstGroup) ? frozenAt : trainable;
    u.shardOffset = next;
    next += u.slice;
  }
}

std::vector<Segment> Partition::segments(int p) const {
  std::vector<Segment> out;
  for (const Unit& u : units_) {
    const int64_t sliceLo = u.flatOffset + static_cast<int64_t>(p) * u.slice;  // flat coordinates
    const int64_t sliceHi = sliceLo + u.slice;
    for (int g = u.firstGroup; g < u.endGroup; ++g) {
      const int64_t gLo = flatOffset_[static_cast<size_t>(g)];
      const int64_t gHi = gLo + numel_[static_cast<size_t>(g)];
      const int64_t lo = std::max(sliceLo, gLo), hi = std::min(sliceHi, gHi);
      if (lo < hi) out.push_back(Segment{g, lo - gLo, hi - gLo, u.shardOffset + (lo - sliceLo)});
    }
  }
  return out;
}

}  // namespace zcoll::zero
