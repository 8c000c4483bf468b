// ordered_executor.hpp - runs a process group's operations one at a time, in the order they were
// submitted (the order every rank issues them in), on a worker thread or on the thread waiting for one.
//
// Why caller-runs: torch issues every operation as "submit, then wait" (async_op=False waits at
// once). Handing each one to a worker and back costs two thread wake-ups, more than a small
// all-reduce itself. So a thread that waits for ticket T runs the queued operations up to T itself
// when no other thread is running one; the worker runs what nobody waits for (async_op=True,
// DDP's bucket all-reduces), so those still overlap the caller's compute. The worker leaves a task
// alone for kGrace after its submission: the submitting thread, about to wait for it, runs it (else
// the woken worker took it first about half the time, and the op paid both wake-ups anyway). While
// the callers run the tasks themselves, submit() does not even wake the worker: it looks for a task
// nobody took, after kPoll and then twice as long each time it found none, up to kMaxPoll (each look
// takes the callers' core for a timer and two switches: every 1 ms it cost a 2-rank 1-4 MiB
// all-reduce 3-10%); a submission behind a task still queued (its submitter did not wait) wakes it
// at once, and once it runs a task, submissions wake it again.
//
// Completion (a task's `complete`, which runs future callbacks) happens outside the ordering: inline
// on a waiting thread that ran the task, and on completion threads for tasks the worker ran - so a
// callback that issues an operation and waits for its future (PowerSGD's hook does) never holds up
// the worker that has to run it. While every completion thread is busy in such a callback, the
// next completion gets a new one (up to kMaxCompleters), since it may be the one they wait for.
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
#include <vector>

namespace zcoll_torch {

class OrderedExecutor {
 public:
  struct Task {
    std::function<void()> run;       // the communication; must not throw
    std::function<void()> complete;  // after run, outside the ordering (may submit and wait); must not throw
  };

  OrderedExecutor();
  // Runs what is still queued and completes it, then joins both threads. Must not run on either.
  ~OrderedExecutor();
  OrderedExecutor(const OrderedExecutor&) = delete;
  OrderedExecutor& operator=(const OrderedExecutor&) = delete;

  // Queues a task; returns its ticket (1, 2, 3...).
  uint64_t submit(Task task);
  // Returns once task `ticket` has run (its complete() may still be running or queued); runs
  // queued tasks on this thread while no other thread runs one. With a timeout (> 0), returns
  // false when it ran out first.
  bool waitFor(uint64_t ticket, std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Whether task `ticket` has run.
  bool done(uint64_t ticket) const;

 private:
  void workerLoop();
  void completerLoop();
  // Pops the front task and runs it with the lock released; returns with the lock held. On the
  // worker, the completion goes to the completion thread; elsewhere it runs here.
  void runFront(std::unique_lock<std::mutex>& lock, bool onWorker);

  static constexpr std::chrono::microseconds kGrace{200};
  static constexpr std::chrono::milliseconds kPoll{1};
  static constexpr std::chrono::milliseconds kMaxPoll{8};
  std::chrono::milliseconds poll_{kPoll};  // the worker's next look while callers run the tasks
  struct Queued {
    uint64_t ticket;
    std::chrono::steady_clock::time_point submitted;
    Task task;
  };
  mutable std::mutex mutex_;
  std::condition_variable cv_;        // waiters: a task ran
  std::condition_variable workerCv_;  // the worker: a task came (unless callerRuns_), or stop
  bool callerRuns_ = false;           // the last task was run by the thread waiting for it
  bool workerSleeps_ = false;         // the worker waits without a deadline: submit() must wake it
  std::deque<Queued> queue_;
  static constexpr size_t kMaxCompleters = 16;
  std::deque<std::function<void()>> completions_;  // from tasks the worker ran, in order
  std::condition_variable completionCv_;
  std::vector<std::thread> completers_;  // started on demand, by the worker
  size_t idleCompleters_ = 0;
  uint64_t nextTicket_ = 1;
  uint64_t completedUpTo_ = 0;  // the last ticket run (runs are serialised)
  bool running_ = false;        // some thread is inside runFront
  bool stop_ = false;
  bool workerDone_ = false;  // the worker has exited: completion threads may stop
  std::thread worker_;
};

}  // namespace zcoll_torch
