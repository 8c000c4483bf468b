// cache.cpp - see cache.hpp.
#include "transport/sim/cache.hpp"

#include <algorithm>

namespace zcoll::sim {

SimCache::SimCache(size_t capacityBytes, size_t blockBytes)
    : capacity_(capacityBytes / blockBytes), block_(blockBytes) {}

void SimCache::drop(std::unordered_map<uint64_t, size_t>::iterator it) {
  const size_t at = it->second;
  where_.erase(it);
  if (at + 1 != held_.size()) {
    held_[at] = held_.back();
    where_[held_[at]] = at;
  }
  held_.pop_back();
}

size_t SimCache::touch(uint64_t space, uint64_t offset, size_t bytes, Access access) {
  if (bytes == 0) return 0;
  size_t missed = 0;
  const uint64_t first = offset / block_, last = (offset + bytes - 1) / block_;
  for (uint64_t b = first; b <= last; ++b) {
    const uint64_t part = std::min<uint64_t>(offset + bytes, (b + 1) * block_) - std::max<uint64_t>(offset, b * block_);
    const uint64_t key = space * 0x9e3779b97f4a7c15ull ^ b;
    auto it = where_.find(key);
    if (access == Access::Stream) {  // to memory, whether held or not
      missed += part;
      if (it != where_.end()) drop(it);
      continue;
    }
    if (it != where_.end()) continue;
    missed += part;
    if (capacity_ == 0) continue;
    if (held_.size() < capacity_) {
      where_.emplace(key, held_.size());
      held_.push_back(key);
      continue;
    }
    random_ ^= random_ << 13, random_ ^= random_ >> 7, random_ ^= random_ << 17;
    if ((random_ >> 32) % kInsertOneIn != 0) continue;
    const size_t at = static_cast<size_t>(random_ % held_.size());
    where_.erase(held_[at]);
    held_[at] = key;
    where_.emplace(key, at);
  }
  return missed;
}

}  // namespace zcoll::sim
