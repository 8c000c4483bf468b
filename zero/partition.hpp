// partition.hpp - where every parameter lives under ZeRO: the pure layout arithmetic of the engine
// (no communication, no allocation beyond its tables), unit-tested in tests/zero/partition_test.cpp.
//
// Groups (the trainer's layers, in registration order) are packed into units. A unit is what one
// collective moves: its groups lie back to back in the flat buffer, followed by padding up to a
// multiple of the partition count P, and partition p owns the unit's p-th slice (padded / P
// elements). Stages 0-2 pack consecutive groups up to the reduce bucket size into one unit (a bucket:
// its gradients are reduced by one call); stage 3 gives every group its own unit (a group is gathered
// on its own). Stage 0 has one partition (every rank holds and updates everything).
//
// A partition's shard is the concatenation of its slices of every unit, in unit order, trainable units
// first and frozen ones after: its master weights and (stage 3) parameters are contiguous arrays of
// shardNumel() elements, its optimizer states and (stages 2-3) gradients of trainableShardNumel().
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zcoll::zero {

struct Unit {
  int firstGroup = 0;      // groups [firstGroup, endGroup)
  int endGroup = 0;
  int64_t flatOffset = 0;  // first element in the flat buffer
  int64_t numel = 0;       // elements of its groups, without padding
  int64_t padded = 0;      // numel rounded up to a multiple of the partition count
  int64_t slice = 0;       // padded / partitions: what each partition owns
  int64_t shardOffset = 0; // where its slice starts in every partition's shard
};

// Elements [lo, hi) of one group, held by a partition at shardOffset in its shard.
struct Segment {
  int group = 0;
  int64_t lo = 0;
  int64_t hi = 0;
  int64_t shardOffset = 0;
};

class Partition {
 public:
  // groupNumel: elements of each group (> 0). bucketElems: the most elements a multi-group unit
  // holds (a larger group forms a unit of its own); <= 0 packs one group per unit. frozen (empty, or
  // one flag per group): a unit never mixes frozen and trainable groups (frozen ones are not reduced).
  Partition(const std::vector<int64_t>& groupNumel, int partitions, int64_t bucketElems,
            const std::vector<bool>& frozen = {});

  int partitions() const { return partitions_; }
  const std::vector<Unit>& units() const { return units_; }
  int unitOf(int group) const { return unitOf_[static_cast<size_t>(group)]; }
  int64_t groupNumel(int group) const { return numel_[static_cast<size_t>(group)]; }
  // The group's first element in the flat buffer.
  int64_t groupFlatOffset(int group) const { return flatOffset_[static_cast<size_t>(group)]; }
  int64_t flatNumel() const { return flatNumel_; }    // every unit, padded
  int64_t shardNumel() const { return shardNumel_; }  // one partition's share
  int64_t trainableShardNumel() const { return trainableShardNumel_; }  // its trainable units' slices
  int64_t totalNumel() const { return totalNumel_; }  // the parameters, unpadded

  // What partition p owns, group by group (padding left out), in unit order.
  std::vector<Segment> segments(int p) const;

 private:
  int partitions_;
  std::vector<int64_t> numel_, flatOffset_;
  std::vector<int> unitOf_;
  std::vector<Unit> units_;
  int64_t flatNumel_ = 0, shardNumel_ = 0, totalNumel_ = 0, trainableShardNumel_ = 0;
};

}  // namespace zcoll::zero
