// mr_cache.cpp - see mr_cache.hpp.
#include "transport/ib/mr_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

namespace zcoll::ib {

MrCache::~MrCache() {
  for (Entry& e : entries_) ibv_dereg_mr(e.mr);
  for (ibv_mr* mr : retired_) ibv_dereg_mr(mr);
}

Status MrCache::add(const void* base, size_t bytes, uint64_t* id) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(base) + bytes + page - 1) & ~(page - 1);
  std::lock_guard lock(mutex_);
  auto covering = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.begin <= begin && end <= e.end; });
  ibv_mr* mr = nullptr;
  if (covering != entries_.end()) {
    ++covering->refs;
    mr = covering->mr;
  } else {
    // Read access only (local read is implied): the memory is the source of writes, never written.
    mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(begin), end - begin, 0);
    if (!mr)
      return systemError(fmt::format("ibv_reg_mr of {} bytes at {} (is the locked-memory limit, ulimit -l, large enough?)",
                                     end - begin, base),
                         errno != 0 ? errno : EIO);
    entries_.push_back(Entry{begin, end, mr, 1});
    dirty_.store(true, std::memory_order_release);
  }
  *id = nextId_++;
  ids_.push_back(Id{*id, mr});
  return Status::ok();
}

void MrCache::remove(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(ids_.begin(), ids_.end(), [&](const Id& i) { return i.id == id; });
  if (it == ids_.end()) return;
  ibv_mr* mr = it->mr;
  ids_.erase(it);
  auto e = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) { return x.mr == mr; });
  if (e == entries_.end() || --e->refs > 0) return;
  entries_.erase(e);
  retired_.push_back(mr);
  dirty_.store(true, std::memory_order_release);
}

void MrCache::refresh() {
  if (!dirty_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  dirty_.store(false, std::memory_order_relaxed);
  view_.clear();
  for (const Entry& e : entries_) view_.push_back(Range{e.begin, e.end, e.mr->lkey});
  last_ = 0;
  for (ibv_mr* mr : retired_) ibv_dereg_mr(mr);
  retired_.clear();
}

bool MrCache::find(const void* p, size_t bytes, uint32_t* lkey) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + bytes;
  auto holds = [&](const Range& r) { return r.begin <= begin && end <= r.end; };
  if (last_ < view_.size() && holds(view_[last_])) {
    *lkey = view_[last_].lkey;
    return true;
  }
  for (size_t i = 0; i < view_.size(); ++i) {  // registrations are few: a scan
    if (!holds(view_[i])) continue;
    last_ = i;
    *lkey = view_[i].lkey;
    return true;
  }
  return false;
}

}  // namespace zcoll::ib
