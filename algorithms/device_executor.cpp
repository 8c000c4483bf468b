// device_executor.cpp - see device_executor.hpp.
#include "algorithms/device_executor.hpp"

namespace zcoll {

Status DeviceExecutor::sync(Deadline deadline) {
  if (!error_) return error_;
  Status failure;
  Waiter waiter(nullptr, policy_, deadline, abort_);
  const WaitResult r = waiter.until(
      [&] {
        bool done = false;
        transport_->progress();
        Status s = rt_->streamQuery(stream_, &done);
        if (!s) failure = std::move(s);
        return done || !failure;
      },
      [] { return -1; });
  if (!failure) return error_ = std::move(failure).withContext("device work");
  if (r == WaitResult::Aborted) return Status(StatusCode::Aborted, "communicator aborted while device work ran");
  if (r == WaitResult::Timeout) return timeoutError("device work did not finish before the timeout");
  return Status::ok();
}

}  // namespace zcoll
