// cache.cpp - see cache.hpp.
#include "transport/sim/cache.hpp"

#include <algorithm>

namespace zcoll::sim {

SimCache::SimCache(size_t capacityBytes, size_t blockBytes, size_t ways) : block_(blockBytes) {
  const size_t blocks = capacityBytes / blockBytes;
  ways_ = ways > 0 && ways < blocks ? ways : blocks;
  held_.resize(ways_ > 0 ? blocks / ways_ : 1);
}

std::vector<uint64_t>& SimCache::setOf(uint64_t key) {
  if (held_.size() == 1) return held_[0];
  // Drawn at a block's first touch and kept: keys come from addresses, which differ from run to run.
  auto [it, first] = setOfBlock_.try_emplace(key, 0);
  if (first) {
    colour_ ^= colour_ << 13, colour_ ^= colour_ >> 7, colour_ ^= colour_ << 17;
    it->second = static_cast<uint32_t>(colour_ % held_.size());
  }
  return held_[it->second];
}

void SimCache::drop(std::unordered_map<uint64_t, size_t>::iterator it) {
  const size_t at = it->second;
  std::vector<uint64_t>& held = setOf(it->first);
  where_.erase(it);
  if (at + 1 != held.size()) {
    held[at] = held.back();
    where_[held[at]] = at;
  }
  held.pop_back();
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
    if (ways_ == 0) continue;
    std::vector<uint64_t>& held = setOf(key);
    if (held.size() < ways_) {
      where_.emplace(key, held.size());
      held.push_back(key);
      continue;
    }
    random_ ^= random_ << 13, random_ ^= random_ >> 7, random_ ^= random_ << 17;
    if ((random_ >> 32) % kInsertOneIn != 0) continue;
    const size_t at = static_cast<size_t>(random_ % held.size());
    where_.erase(held[at]);
    held[at] = key;
    where_.emplace(key, at);
  }
  return missed;
}

}  // namespace zcoll::sim
