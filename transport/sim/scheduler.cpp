// scheduler.cpp - cooperative tasks on ucontext (scheduler.hpp).
#include "transport/sim/scheduler.hpp"

#include <sys/mman.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

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

#if defined(__x86_64__)
// zcollSimSwitch(save, to): pushes the callee-saved registers and the SSE and x87 control words, stores
// the stack pointer at *save, and pops the same from the stack `to` was saved from. A new task's
// stack starts as such a frame whose return address is zcollSimStart, which calls r14(r12).
extern "C" void zcollSimSwitch(void** save, void* to);
extern "C" void zcollSimStart();
asm(R"(
    .pushsection .text
    .globl zcollSimSwitch
    .hidden zcollSimSwitch
    .type zcollSimSwitch, @function
zcollSimSwitch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size zcollSimSwitch, .-zcollSimSwitch

    .globl zcollSimStart
    .hidden zcollSimStart
    .type zcollSimStart, @function
zcollSimStart:
    movq %r12, %rdi
    call *%r14
    ud2
    .size zcollSimStart, .-zcollSimStart
    .popsection
)");

// The frame zcollSimSwitch pops, in stack order (lowest address first).
struct StartFrame {
  uint32_t mxcsr;
  uint16_t fpuControl, pad;
  uint64_t r15, r14, r13, r12, rbx, rbp;
  void (*ret)();
};
static_assert(sizeof(StartFrame) == 64);
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

void Scheduler::taskMain(Scheduler* self) {
  arrived(nullptr, true);
  Task& t = self->tasks_[static_cast<size_t>(self->current_)];
  try {
    t.fn();
  } catch (...) {
    std::abort();  // a task must not throw: its stack has no caller to unwind into
  }
  t.done = true;
  toMain(nullptr);  // this stack ends here
#if defined(__x86_64__)
  zcollSimSwitch(&t.sp, self->mainSp_);  // never comes back
  std::abort();
#endif
}  // ucontext: returns to main_ (uc_link)

#if !defined(__x86_64__)
void Scheduler::entry(unsigned lo, unsigned hi) {
  taskMain(reinterpret_cast<Scheduler*>((static_cast<uintptr_t>(hi) << 32) | lo));
}
#endif

void Scheduler::prepare(size_t i) {
  Task& t = tasks_[i];
  // Address space only: a task's stack pages come when it uses them.
  void* stack = mmap(nullptr, stackBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stack == MAP_FAILED) std::abort();
  t.stack = static_cast<char*>(stack);
#if defined(__x86_64__)
  // The first switch to the task pops this frame and returns into zcollSimStart, with the stack
  // 16-byte aligned there (its call then enters taskMain as any call does).
  auto* frame = reinterpret_cast<StartFrame*>(t.stack + stackBytes_ - sizeof(StartFrame) - 16);
  *frame = StartFrame{};
  frame->mxcsr = _mm_getcsr();
  asm volatile("fnstcw %0" : "=m"(frame->fpuControl));
  frame->r12 = reinterpret_cast<uint64_t>(this);
  frame->r14 = reinterpret_cast<uint64_t>(&Scheduler::taskMain);
  frame->ret = &zcollSimStart;
  t.sp = frame;
#else
  getcontext(&t.context);
  t.context.uc_stack.ss_sp = t.stack;
  t.context.uc_stack.ss_size = stackBytes_;
  t.context.uc_link = &main_;
  const auto self = reinterpret_cast<uintptr_t>(this);
  makecontext(&t.context, reinterpret_cast<void (*)()>(&Scheduler::entry), 2, static_cast<unsigned>(self),
              static_cast<unsigned>(self >> 32));
#endif
  makeRunnable(static_cast<int>(i));
}

void Scheduler::makeRunnable(int id) {
  if (timed_) timedRunnable_.push(Entry{tasks_[static_cast<size_t>(id)].key, order_++, id});
  else runnable_.push_back(id);
}

bool Scheduler::run(std::vector<int>* stuck) {
  for (size_t i = 0; i < tasks_.size(); ++i) prepare(i);
  while (!runnable_.empty() || !timedRunnable_.empty()) {
    if (!timedRunnable_.empty()) {
      current_ = timedRunnable_.top().id;
      timedRunnable_.pop();
    } else {
      current_ = runnable_.front();
      runnable_.pop_front();
    }
    Task& t = tasks_[static_cast<size_t>(current_)];
    void* fake = nullptr;
    toStack(&fake, t.stack, stackBytes_);
#if defined(__x86_64__)
    zcollSimSwitch(&mainSp_, t.sp);
#else
    swapcontext(&main_, &t.context);
#endif
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

void Scheduler::toMainFrom(Task& t) {
  void* fake = nullptr;
  toMain(&fake);
#if defined(__x86_64__)
  zcollSimSwitch(&t.sp, mainSp_);
#else
  swapcontext(&t.context, &main_);
#endif
  arrived(fake, false);
}

void Scheduler::block() {
  Task& t = tasks_[static_cast<size_t>(current_)];
  t.blocked = true;
  toMainFrom(t);
}

void Scheduler::yield(bool ties) {
  Task& t = tasks_[static_cast<size_t>(current_)];
  if (!timed_ || timedRunnable_.empty()) return;
  if (const double first = timedRunnable_.top().key; first > t.key || (first == t.key && !ties)) return;
  makeRunnable(current_);
  toMainFrom(t);
}

void Scheduler::wake(int id) {
  Task& t = tasks_[static_cast<size_t>(id)];
  if (!t.blocked) return;
  t.blocked = false;
  makeRunnable(id);
}

}  // namespace zcoll::sim
