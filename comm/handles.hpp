// handles.hpp - the opaque C handles and their validation.
//
// A zcollComm_t is valid from a successful init until destroy/abort begins. Live handles are kept
// in a registry, so a destroyed or foreign handle is a clear InvalidUsage, not a crash. CommRef
// holds a communicator for the length of one API call (abort and destroy wait for such holders).
//
// Every call validates its handle, so the check has a lock-free fast path: a thread remembers the
// last handle it validated and the registry's epoch then (bumped whenever a handle stops being
// live); the same handle at the same epoch is still live. A handle's memory is never returned to
// the allocator (destroyed handles are reused by later inits, under a new epoch), so that check
// may touch a handle destroyed a moment ago.
//
// A call announces itself to destroy/abort in its thread's CallSlot (a plain store) where the process
// can use membarrier (core/membarrier.hpp): the destroyer bumps the epoch, fences every thread
// (processBarrier), then waits until no slot names the handle - a call that announced itself before
// is seen, one that announces itself after sees the new epoch and backs out. No locked instruction
// on a call's path. Elsewhere, and for a second handle held by the same thread (a group), the call
// counts itself in the handle's activeCalls (two locked adds per call).
#pragma once

#include <atomic>
#include <memory>

#include "comm/communicator.hpp"
#include "zcoll/zcoll.h"

struct zcollComm {
  std::unique_ptr<zcoll::Communicator> impl;
  // API calls inside this communicator now that are not in a CallSlot (destroy and abort wait for
  // them to leave).
  std::atomic<int> activeCalls{0};
};

// zcollRequest_t is a zcoll::Request* (reinterpret_cast at the boundary).

namespace zcoll {

// One per thread that has called through the fast path (reused after the thread exits; never freed):
// the handle its current call is in, or null.
struct alignas(64) CallSlot {  // a line each: threads on different communicators share none
  std::atomic<zcollComm_t> inCall{nullptr};
  std::atomic<bool> owned{false};
};

// A handle for `impl` (a reused one or a new one), registered as live.
zcollComm_t registerHandle(std::unique_ptr<Communicator> impl);
// Removes the handle from the registry; false if it was not live.
bool unregisterHandle(zcollComm_t comm);
// After unregisterHandle: waits until no call is inside the handle, deletes its communicator and
// keeps the handle for reuse.
void retireHandle(zcollComm_t comm);

class CommRef {
 public:
  CommRef() = default;
  CommRef(const CommRef&) = delete;
  CommRef& operator=(const CommRef&) = delete;
  ~CommRef() {
    if (slot_) slot_->inCall.store(nullptr, std::memory_order_release);
    else if (handle_) handle_->activeCalls.fetch_sub(1, std::memory_order_release);
  }
  // Validates `handle` and pins its communicator until this CommRef goes away.
  Status acquire(zcollComm_t handle, const char* argName = "comm");
  Communicator* operator->() const { return comm_; }
  Communicator* get() const { return comm_; }

 private:
  // The registry's verdict, under its lock (the first call of a thread, or after the epoch moved).
  Status acquireLocked(zcollComm_t handle, const char* argName);

  zcollComm_t handle_ = nullptr;
  Communicator* comm_ = nullptr;
  CallSlot* slot_ = nullptr;  // the call is announced here, not in handle_->activeCalls
};

}  // namespace zcoll
