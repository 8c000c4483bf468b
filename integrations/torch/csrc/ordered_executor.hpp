// ordered_executor.hpp - runs a process group's operations one at a time, in the order they were
// submitted (the order every rank issues them in), on a worker thread or on the thread waiting for one.
//
// Why caller-runs: torch issues every operation as "submit, then wait" (async_op=False waits at
// once). Handing each one to a worker and back costs two thread wake-ups, more than a small
// all-reduce itself. So a thread that waits for ticket T runs the queued operations up to T itself
// when no other thread is running one; the worker runs what nobody waits for (async_op=True,
// DDP's bucket all-reduces), so those still overlap the caller's compute.
//
// No torch here: the torch layer wraps each operation in a Task.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace zcoll_torch {

class OrderedExecutor {
 public:
  struct Task {
    std::function<void()> run;       // the communication; must not throw
    std::function<void()> complete;  // after run, on the same thread, outside the ordering: the
                                     // next task may already run (so it may submit and wait)
  };

  OrderedExecutor();
  // Runs what is still queued, then joins the worker.
  ~OrderedExecutor();
  OrderedExecutor(const OrderedExecutor&) = delete;
  OrderedExecutor& operator=(const OrderedExecutor&) = delete;

  // Queues a task; returns its ticket (1, 2, 3...).
  uint64_t submit(Task task);
  // Returns once task `ticket` has run (its complete() may still be running on the thread that ran
  // it); runs queued tasks on this thread while no other thread runs one. With a timeout (> 0),
  // returns false when it ran out first.
  bool waitFor(uint64_t ticket, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Whether task `ticket` has run.
  bool done(uint64_t ticket) const;

 private:
  void workerLoop();
  // Pops the front task and runs it with the lock released; returns with the lock held.
  void runFront(std::unique_lock<std::mutex>& lock);

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, Task>> queue_;
  uint64_t nextTicket_ = 1;
  uint64_t completedUpTo_ = 0;  // the last ticket run (runs are serialised)
  bool running_ = false;        // some thread is inside runFront
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace zcoll_torch
