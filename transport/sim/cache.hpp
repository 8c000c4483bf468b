// cache.hpp - a host's last-level cache as zcoll-sim models it: the blocks of memory that an op's
// steps read and write (slots, and the caller's buffers as Primitives reports them), held up to a
// capacity. A miss enters a cache that has room; once it is full, one miss in kInsertOneIn does, in
// the place of a block taken at random (bimodal insertion, as thrash-resistant last-level caches do:
// data cycled through a cache a little too small for it keeps a part of it instead of none).
// With `ways`, the cache is sets of that many blocks, a block going to a set drawn at its first touch
// (the pages' physical addresses, and so their sets, fall as they may; drawn in touch order, a run's
// sets do not depend on where its buffers were mapped): a working set near the capacity overfills
// some sets and misses there, as a real set-associative cache does before it is full.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace zcoll::sim {

class SimCache {
 public:
  enum class Access { Read, Write, Stream };  // Stream: a non-temporal store, around the cache
  static constexpr uint64_t kInsertOneIn = 32;  // BIP's throttle (Qureshi et al., ISCA 2007)

  // ways 0: one set (fully associative); else sets of `ways` blocks (one set if the capacity is less).
  explicit SimCache(size_t capacityBytes, size_t blockBytes = 4096, size_t ways = 0);
  // The bytes of [offset, offset + bytes) of memory `space` (an id per buffer) that the cache did not
  // hold: they move to or from memory. A streamed block leaves the cache.
  size_t touch(uint64_t space, uint64_t offset, size_t bytes, Access access);

 private:
  void drop(std::unordered_map<uint64_t, size_t>::iterator it);
  std::vector<uint64_t>& setOf(uint64_t key);

  size_t ways_;  // blocks per set
  size_t block_;
  std::vector<std::vector<uint64_t>> held_;     // per set, the blocks held (keys), in no order
  std::unordered_map<uint64_t, size_t> where_;  // key -> index in its set's held_
  std::unordered_map<uint64_t, uint32_t> setOfBlock_;  // with ways: key -> its set, from its first touch
  uint64_t random_ = 0x9e3779b97f4a7c15ull;     // xorshift64: every run the same
  uint64_t colour_ = 0x2545f4914f6cdd1dull;     // the sets' draws, apart from the victims' draws
};

}  // namespace zcoll::sim
