// scheduler.cpp - cooperative tasks on ucontext (scheduler.hpp).
#include "transport/sim/scheduler.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace zcoll::sim {

namespace {

// AddressSanitizer must hear of every switch of stacks (else it takes a task's stack for an overflow).
#if defined(__SANITIZE_ADDRESS__)
const void* mainBottom = nullptr;
size_t mainSize = 0;
void toStack(void** fake, const void* bottom, size_t size) { __sanitizer_start_switch_fiber(fake, bottom, size); }
void arrived(void* fake, bool fromMain) {
  __sanitizer_finish_switch_fiber(fake, fromMain ? &mainBottom : nullptr, fromMain ? &mainSize : nullptr);
}
void toMain(void** fake) { __sanitizer_start_switch_fiber(fake, mainBottom, mainSize); }
#else
void toStack(void**, const void*, size_t) {}
void arrived(void*, bool) {}
void toMain(void**) {}
#endif

}  // namespace

Scheduler::~Scheduler() {
  for (Task& t : tasks_)
    if (t.stack) munmap(t.stack, stackBytes_);
}

void Scheduler::spawn(std::function<void()> fn) {
  tasks_.emplace_back();
  tasks_.back().fn = std::move(fn);
}

void Scheduler::entry(unsigned lo, unsigned hi) {
  arrived(nullptr, true);
  auto* self = reinterpret_cast<Scheduler*>((static_cast<uintptr_t>(hi) << 32) | lo);
  Task& t = self->tasks_[static_cast<size_t>(self->current_)];
  try {
    t.fn();
  } catch (...) {
    std::abort();  // a task must not throw: its stack has no caller to unwind into
  }
  t.done = true;
  toMain(nullptr);  // this stack ends here
}  // returns to main_ (uc_link)

void Scheduler::prepare(size_t i) {
  Task& t = tasks_[i];
  // Address space only: a task's stack pages come when it uses them.
  void* stack = mmap(nullptr, stackBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack == MAP_FAILED) std::abort();
  t.stack = static_cast<char*>(stack);
  getcontext(&t.context);
  t.context.uc_stack.ss_sp = t.stack;
  t.context.uc_stack.ss_size = stackBytes_;
  t.context.uc_link = &main_;
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(&t.context, reinterpret_cast<void (*)()>(&Scheduler::entry), 2, static_cast<unsigned>(self),
              static_cast<unsigned>(self >> 32));
  runnable_.push_back(static_cast<int>(i));
}

bool Scheduler::run(std::vector<int>* stuck) {
  for (size_t i = 0; i < tasks_.size(); ++i) prepare(i);
  while (!runnable_.empty()) {
    current_ = runnable_.front();
    runnable_.pop_front();
    Task& t = tasks_[static_cast<size_t>(current_)];
    void* fake = nullptr;
    toStack(&fake, t.stack, stackBytes_);
    swapcontext(&main_, &t.context);
    arrived(fake, false);
    if (t.done && t.stack) {
      munmap(t.stack, stackBytes_);
      t.stack = nullptr;
    }
  }
  current_ = -1;
  stuck->clear();
  for (size_t i = 0; i < tasks_.size(); ++i)
    if (!tasks_[i].done) stuck->push_back(static_cast<int>(i));
  return stuck->empty();
}

void Scheduler::block() {
  Task& t = tasks_[static_cast<size_t>(current_)];
  t.blocked = true;
  void* fake = nullptr;
  toMain(&fake);
  swapcontext(&t.context, &main_);
  arrived(fake, false);
}

void Scheduler::wake(int id) {
  Task& t = tasks_[static_cast<size_t>(id)];
  if (!t.blocked) return;
  t.blocked = false;
  runnable_.push_back(id);
}

}  // namespace zcoll::sim
