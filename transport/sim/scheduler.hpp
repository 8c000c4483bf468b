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
#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
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
  // Timed: the runnable task of the smallest key runs next (ties: the one made runnable first), so that
  // tasks act in the order of their virtual times (the sim's ranks that share cores). Else in turn.
  void setTimed(bool timed) { timed_ = timed; }
  void setKey(int id, double key) { tasks_[static_cast<size_t>(id)].key = key; }
  // From a task, timed: lets every runnable task of a smaller key run first (ties too: of the same key).
  void yield(bool ties = false);
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
    double key = 0;
  };
  struct Entry {
    double key;
    uint64_t order;
    int id;
    bool operator>(const Entry& o) const { return key != o.key ? key > o.key : order > o.order; }
  };
  void makeRunnable(int id);
  void toMainFrom(Task& t);  // the current task's switch back to run()
  void prepare(size_t i);  // task i's stack and context (apart: getcontext returns twice)
  // Runs task current_'s function, then leaves its stack for good.
  static void taskMain(Scheduler* self);
#if !defined(__x86_64__)
  static void entry(unsigned lo, unsigned hi);  // makecontext's int arguments to taskMain
#endif

  size_t stackBytes_;
  std::vector<Task> tasks_;
  std::deque<int> runnable_;
  bool timed_ = false;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> timedRunnable_;
  uint64_t order_ = 0;
#if defined(__x86_64__)
  void* mainSp_ = nullptr;
#else
  ucontext_t main_;
#endif
  int current_ = -1;
};

}  // namespace zcoll::sim
