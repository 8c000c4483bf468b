// device_executor.hpp - how algorithms compute on device memory: the copies and reductions of one
// operation queued in order on the communicator's device stream (CUDA kernels, or the emulation's
// host kernels), and the waits that hand a slot back to the transport only once the work that reads
// or writes it has finished. Primitives use it in place of the host kernels when the operation's
// buffers are device memory: one copy of each algorithm serves both kinds (docs/architecture.md).
#pragma once

#include <atomic>

#include "algorithms/scratch.hpp"
#include "core/clock.hpp"
#include "core/device.hpp"
#include "core/status.hpp"
#include "transport/wait.hpp"

namespace zcoll {

class DeviceExecutor {
 public:
  // transport: the operation's, progressed while device work runs (so network transfers overlap it).
  DeviceExecutor(DeviceRuntime* rt, DevStream stream, Transport* transport, WaitPolicy policy,
                 const std::atomic<bool>* abort)
      : rt_(rt), stream_(stream), transport_(transport), policy_(policy), abort_(abort) {}

  DeviceRuntime* runtime() const { return rt_; }

  // Queue work; a failure to queue is kept and returned by the next sync().
  void copy(void* dst, const void* src, size_t bytes) {
    if (bytes) keep(rt_->copyAsync(dst, src, bytes, stream_));
  }
  // dst = a OP b (and dst2 = the same when not null), divided by divisor when > 0.
  void reduce(void* dst, void* dst2, const void* a, const void* b, size_t n, DataType t, RedOp op, int divisor) {
    if (n) keep(rt_->reduceAsync(dst, dst2, a, b, n, t, op, divisor, stream_));
  }
  void divide(void* data, size_t n, DataType t, int divisor) {
    if (n) keep(rt_->divideAsync(data, n, t, divisor, stream_));
  }

  // Waits until everything queued so far has run; bounded by the deadline, stopped by abort.
  Status sync(Deadline deadline);

 private:
  void keep(Status s) {
    if (error_ && !s) error_ = std::move(s);
  }

  DeviceRuntime* rt_;
  DevStream stream_;
  Transport* transport_;
  WaitPolicy policy_;
  const std::atomic<bool>* abort_;
  Status error_;
};

// A communicator's device scratch (Scratch's grow-once policy, in device memory).
class DeviceScratch final : public Scratch {
 public:
  ~DeviceScratch() override { release(); }
  void bind(DeviceRuntime* rt) { rt_ = rt; }

 private:
  void* acquire(size_t bytes) override {
    void* p = nullptr;
    return rt_ && rt_->alloc(bytes, &p) ? p : nullptr;
  }
  void drop(void* p, size_t) override { rt_->free(p); }

  DeviceRuntime* rt_ = nullptr;
};

}  // namespace zcoll
