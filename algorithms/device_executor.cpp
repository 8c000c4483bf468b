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

void* DeviceScratch::get(size_t bytes) {
  if (bytes <= size_) return data_;
  release();
  const size_t want = (bytes + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
  if (!rt_ || !rt_->alloc(want, &data_)) {
    data_ = nullptr;
    return nullptr;
  }
  size_ = want;
  return data_;
}

void DeviceScratch::release() {
  if (data_) rt_->free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace zcoll
