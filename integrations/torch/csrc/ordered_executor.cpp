// ordered_executor.cpp - see ordered_executor.hpp.
#include "ordered_executor.hpp"

#include <algorithm>
#include <utility>

namespace zcoll_torch {

OrderedExecutor::OrderedExecutor() : worker_([this] { workerLoop(); }) {}

OrderedExecutor::~OrderedExecutor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  workerCv_.notify_all();
  worker_.join();  // runs what is queued first
  {
    std::lock_guard<std::mutex> lock(mutex_);
    workerDone_ = true;
  }
  completionCv_.notify_all();
  for (std::thread& t : completers_) t.join();  // then completes what is left
}

uint64_t OrderedExecutor::submit(Task task) {
  uint64_t ticket;
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = nextTicket_++;
    queue_.push_back(Queued{ticket, std::chrono::steady_clock::now(), std::move(task)});
    // An older task still queued: its submitter went on without waiting, so the worker looks now.
    wake = !callerRuns_ || workerSleeps_ || queue_.size() > 1;
    if (queue_.size() > 1) poll_ = kPoll;
  }
  if (wake) workerCv_.notify_one();
  return ticket;
}

void OrderedExecutor::runFront(std::unique_lock<std::mutex>& lock, bool onWorker) {
  uint64_t ticket = queue_.front().ticket;
  Task task = std::move(queue_.front().task);
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  task.run();
  task.run = nullptr;  // what it held goes now, without the lock
  lock.lock();
  running_ = false;
  callerRuns_ = !onWorker;
  if (onWorker) poll_ = kPoll;  // should callers take over again, the worker looks soon
  completedUpTo_ = ticket;  // runs are serialised, so this only grows
  cv_.notify_all();
  if (!onWorker && !queue_.empty()) workerCv_.notify_one();  // the worker waited while this one ran
  if (!task.complete) return;
  if (onWorker) {
    completions_.push_back(std::move(task.complete));
    if (idleCompleters_ < completions_.size() && completers_.size() < kMaxCompleters)
      completers_.emplace_back([this] { completerLoop(); });
    else
      completionCv_.notify_one();
    return;
  }
  lock.unlock();
  task.complete();
  task.complete = nullptr;
  lock.lock();
}

bool OrderedExecutor::waitFor(uint64_t ticket, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  while (completedUpTo_ < ticket) {
    if (!running_ && !queue_.empty() && queue_.front().ticket <= ticket) {
      runFront(lock, false);
      continue;
    }
    if (timeout.count() <= 0) {
      cv_.wait(lock);
    } else if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && completedUpTo_ < ticket) {
      return false;
    }
  }
  return true;
}

bool OrderedExecutor::done(uint64_t ticket) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completedUpTo_ >= ticket;
}

void OrderedExecutor::workerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!running_ && !queue_.empty()) {
      const auto due = queue_.front().submitted + kGrace;
      if (!stop_ && std::chrono::steady_clock::now() < due) {  // its submitter may be about to wait for it
        workerCv_.wait_until(lock, due);
        continue;
      }
      runFront(lock, true);
      continue;
    }
    if (stop_ && queue_.empty() && !running_) return;
    if (callerRuns_) {
      if (workerCv_.wait_for(lock, poll_) == std::cv_status::timeout && queue_.empty())
        poll_ = std::min(poll_ * 2, kMaxPoll);
    } else {
      workerSleeps_ = true;
      workerCv_.wait(lock);
      workerSleeps_ = false;
    }
  }
}

void OrderedExecutor::completerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!completions_.empty()) {
      std::function<void()> complete = std::move(completions_.front());
      completions_.pop_front();
      lock.unlock();
      complete();
      complete = nullptr;
      lock.lock();
      continue;
    }
    if (workerDone_) return;  // nothing more can arrive
    ++idleCompleters_;
    completionCv_.wait(lock);
    --idleCompleters_;
  }
}

}  // namespace zcoll_torch
