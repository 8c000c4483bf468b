// work.hpp - the torch backend's Work: completed by the executor task that ran its operation; its
// wait() runs queued operations itself when no thread is running them.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "ordered_executor.hpp"
#include "process_group.hpp"

namespace zcoll_torch {

// A Work whose wait() runs the queued operations itself when no thread is running them.
class ZcollWork : public c10d::Work {
 public:
  ZcollWork(int rank, c10d::OpType type, const std::shared_ptr<OrderedExecutor>& executor,
            std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), executor_(executor), outputs_(std::move(outputs)) {}

  void setTicket(uint64_t ticket) { ticket_.store(ticket); }
  // On the thread that ran the operation, before complete().
  void setError(std::exception_ptr e) { error_ = std::move(e); }
  // The future first: wait() returns once finish() ran, and then the future must be complete.
  void complete() {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ran_ = true;
      future = future_;
    }
    if (future) resolve(*future);
    finish(error_);
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override {
    const uint64_t ticket = ticket_.load();
    TORCH_CHECK(ticket != 0,
                "zcoll: wait() on a send or receive inside a coalescing block (batch_isend_irecv); "
                "wait once the block has ended");
    // The executor is gone only once the group is destroyed, and then every task has run.
    if (std::shared_ptr<OrderedExecutor> executor = executor_.lock())
      TORCH_CHECK(executor->waitFor(ticket, timeout), "zcoll: wait() timed out after ", timeout.count(), " ms");
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_; });
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  // Made on first request (most works are only waited for): complete at once if the work ran.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    static const c10::TypePtr kTensorList = c10::ListType::create(c10::TensorType::get());
    bool ran;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (future_) return future_;
      future_ = c10::make_intrusive<c10::ivalue::Future>(kTensorList);
      future = future_;
      ran = ran_;
    }
    if (ran) resolve(*future);
    return future;
  }
  // A receive from any source: the rank it came from (set on the executor before complete()).
  void setSource(int rank) { source_.store(rank); }
  int sourceRank() const override { return source_.load(); }

 private:
  std::atomic<int> source_{-1};
  // Weak: the group owns the executor; a task (holding its work) must never hold the last
  // reference, or the executor would be destroyed by its own thread.
  std::weak_ptr<OrderedExecutor> executor_;
  std::vector<at::Tensor> outputs_;
  // The operation's outcome into the future, once (by complete() or by a getFuture() after it). A
  // callback that throws must not leave the work unfinished.
  void resolve(c10::ivalue::Future& future) {
    try {
      if (error_) future.setError(error_);
      else future.markCompleted(c10::IValue(outputs_));
    } catch (const std::exception& e) {
      TORCH_WARN("zcoll: a callback of a work's future raised: ", e.what());
    } catch (...) {
      TORCH_WARN("zcoll: a callback of a work's future raised");
    }
  }

  c10::intrusive_ptr<c10::ivalue::Future> future_;  // under mutex_
  bool ran_ = false;                                // under mutex_: complete() began
  std::atomic<uint64_t> ticket_{0};
  std::exception_ptr error_;
};

}  // namespace zcoll_torch
