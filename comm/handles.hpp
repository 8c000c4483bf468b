// handles.hpp - the opaque C handles and their validation.
//
// A zcollComm_t is valid from a successful init until destroy/abort begins. Live handles are kept
// in a registry, so a destroyed or foreign handle is a clear InvalidUsage, not a crash. CommRef
// holds a communicator for the length of one API call (abort and destroy wait for such holders).
#pragma once

#include <memory>

#include "comm/communicator.hpp"
#include "zcoll/zcoll.h"

struct zcollComm {
  std::unique_ptr<zcoll::Communicator> impl;
};

// zcollRequest_t is a zcoll::Request* (reinterpret_cast at the boundary).

namespace zcoll {

void registerHandle(zcollComm_t comm);
// Removes the handle from the registry; false if it was not live.
bool unregisterHandle(zcollComm_t comm);

class CommRef {
 public:
  CommRef() = default;
  CommRef(const CommRef&) = delete;
  CommRef& operator=(const CommRef&) = delete;
  ~CommRef() {
    if (comm_) comm_->activeCalls.fetch_sub(1);
  }
  // Validates `handle` and pins its communicator until this CommRef goes away.
  Status acquire(zcollComm_t handle, const char* argName = "comm");
  Communicator* operator->() const { return comm_; }
  Communicator* get() const { return comm_; }

 private:
  Communicator* comm_ = nullptr;
};

}  // namespace zcoll
