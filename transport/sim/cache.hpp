// cache.hpp - a host's last-level cache as zcoll-sim models it: the blocks of memory that an op's
// steps read and write (slots, and the caller's buffers as Primitives reports them), held up to a
// capacity. A miss enters a cache that has room; once it is full, one miss in kInsertOneIn does, in
// the place of a block taken at random (bimodal insertion, as thrash-resistant last-level caches do:
// data cycled through a cache a little too small for it keeps a part of it instead of none).
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

  explicit SimCache(size_t capacityBytes, size_t blockBytes = 4096);
  // The bytes of [offset, offset + bytes) of memory `space` (an id per buffer) that the cache did not
  // hold: they move to or from memory. A streamed block leaves the cache.
  size_t touch(uint64_t space, uint64_t offset, size_t bytes, Access access);

 private:
  void drop(std::unordered_map<uint64_t, size_t>::iterator it);

  size_t capacity_;  // in blocks
  size_t block_;
  std::vector<uint64_t> held_;                  // the blocks held (keys), in no order
  std::unordered_map<uint64_t, size_t> where_;  // key -> index in held_
  uint64_t random_ = 0x9e3779b97f4a7c15ull;     // xorshift64: every run the same
};

}  // namespace zcoll::sim
