// scheduler.hpp - the sim's ranks as cooperative tasks on one thread: thousands of ranks without
// thousands of threads, and a switch between them that costs a context swap, not a futex and the
// kernel's scheduler. A task runs until it blocks (its rank waits for a chunk or a slot) or ends.
// On x86-64 the swap saves the callee-saved registers and the stack pointer, no more (ucontext's
// swapcontext also makes a sigprocmask system call per switch: a fifth of a 4,096-rank run);
// elsewhere it is ucontext's.
#pragma once

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <vector>

namespace zcoll::sim {

class Scheduler {
 public:
  explicit Scheduler(size_t stackBytes = 256 << 10) : stackBytes_(stackBytes) {}
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Adds task `id` (ids 0..n-1 in order) before run().
  void spawn(std::function<void()> fn);
  // Runs every task until all have ended. False if the tasks left are all blocked (a deadlock: nothing
  // can wake them), with *stuck listing them.
  bool run(std::vector<int>* stuck);
  // From a task: gives up the thread until another task wakes this one.
  void block();
  // Makes a blocked task runnable (a no-op for one that is not blocked).
  void wake(int id);
  int current() const { return current_; }
  size_t tasks() const { return tasks_.size(); }

 private:
  struct Task {
#if defined(__x86_64__)
    void* sp = nullptr;  // the task's saved stack pointer while it does not run
#else
    ucontext_t context;
#endif
    char* stack = nullptr;
    std::function<void()> fn;
    bool blocked = false, done = false;
  };
  void prepare(size_t i);  // task i's stack and context (apart: getcontext returns twice)
  // Runs task current_'s function, then leaves its stack for good.
  static void taskMain(Scheduler* self);
#if !defined(__x86_64__)
  static void entry(unsigned lo, unsigned hi);  // makecontext's int arguments to taskMain
#endif

  size_t stackBytes_;
  std::vector<Task> tasks_;
  std::deque<int> runnable_;
#if defined(__x86_64__)
  void* mainSp_ = nullptr;
#else
  ucontext_t main_;
#endif
  int current_ = -1;
};

}  // namespace zcoll::sim
