// mr_cache.hpp - registrations of caller memory with the NIC (zcollCommRegister), for zero-copy
// sends: the ib transport's memory-registration cache (the shape of NCCL's ncclIbMrCache).
//
// Ranges are widened to whole pages; one ibv_mr per distinct range, reference-counted: registering
// a buffer again, or a range inside one already registered, reuses its MR. Each registration has an
// id (> 0) for remove(); an MR is deregistered once its last reference is gone.
//
// Threads: add() and remove() may come from the application's thread while the communicator's
// progress thread runs an operation. They change the table under a mutex and raise a flag; the
// thread that runs operations reads its own copy (view), refreshed by refresh() at a point where no
// zero-copy write is in flight - which is also when a removed MR is deregistered, so a posted write
// never names a dead key. find() takes no lock and makes no syscall.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/status.hpp"

namespace zcoll::ib {

class MrCache {
 public:
  explicit MrCache(ibv_pd* pd) : pd_(pd) {}
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // Registers [base, base + bytes) as the source of RDMA writes; *id for remove().
  Status add(const void* base, size_t bytes, uint64_t* id);
  void remove(uint64_t id);  // an unknown id is ignored
  // The operation thread, with no zero-copy write in flight: takes in the changes since the last
  // call and deregisters removed MRs. One atomic load when nothing changed.
  void refresh();
  // The lkey of a registration holding all of [p, p + bytes) in the view, or false.
  bool find(const void* p, size_t bytes, uint32_t* lkey);
  bool empty() const { return view_.empty(); }

 private:
  struct Entry {
    uintptr_t begin = 0, end = 0;
    ibv_mr* mr = nullptr;
    int refs = 0;
  };
  struct Range {
    uintptr_t begin, end;
    uint32_t lkey;
  };
  struct Id {
    uint64_t id;
    ibv_mr* mr;
  };

  ibv_pd* pd_;
  std::vector<Range> view_;  // the operation thread's copy
  size_t last_ = 0;          // view_ index of the last hit
  std::mutex mutex_;         // guards what follows
  std::vector<Entry> entries_;
  std::vector<Id> ids_;
  std::vector<ibv_mr*> retired_;  // removed, deregistered at the next refresh()
  uint64_t nextId_ = 1;
  std::atomic<bool> dirty_{false};
};

}  // namespace zcoll::ib
