// wait.hpp - the one way zcoll waits for a peer: spin briefly, then yield, then sleep on the
// transport's doorbell; always bounded by the communicator's deadline and stopped by abort.
//
// Four ranks on two cores must still progress: the spin phase is short (ZCOLL_SPIN_NS), the yield
// phase hands the core to the rank we wait for (ZCOLL_YIELD_NS), and the sleep phase costs no CPU.
// Sleep slices are at most 50 ms so that abort, the deadline and a dead peer are seen promptly.
#pragma once

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/clock.hpp"
#if defined(ZCOLL_WAIT_TRACE)
#include "core/wait_trace.hpp"
#endif
#include "transport/transport.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZCOLL_CPU_RELAX() _mm_pause()
#else
#define ZCOLL_CPU_RELAX() ((void)0)
#endif

namespace zcoll {

enum class WaitResult { Ready, Timeout, Aborted, PeerDied };

struct WaitPolicy {
  int64_t spinNs = 2'000;
  int64_t yieldNs = 50'000;
};

// transport may be null for a wait nothing rings a doorbell for (device work): it then sleeps in
// 20 us steps.
class Waiter {
 public:
  Waiter(Transport* transport, WaitPolicy policy, Deadline deadline, const std::atomic<bool>* abort)
      : transport_(transport), policy_(policy), deadlineNs_(deadline.ns()), abort_(abort) {}
  // The deadline is `timeoutMs` after the first wait that does not find its condition ready (or the
  // first deadline() call): an operation that never waits reads no clock.
  Waiter(Transport* transport, WaitPolicy policy, int64_t timeoutMs, const std::atomic<bool>* abort)
      : transport_(transport), policy_(policy), timeoutNs_(timeoutMs * 1'000'000), abort_(abort) {
#if defined(ZCOLL_WAIT_TRACE)
    wait_trace::record(wait_trace::ticks(), 0);  // an op begins (a communicator makes one Waiter per op)
#endif
  }

  Deadline deadline() {
    if (deadlineNs_ == kUnset) deadlineNs_ = nowNs() + timeoutNs_;
    return Deadline::atNs(deadlineNs_);
  }
  // After PeerDied: the rank whose process ended.
  int deadPeer() const { return deadPeer_; }
  // Whom the operation's failure blames (a communicator rank; -1: nobody yet) and whether it stalled
  // rather than died: the communicator announces it to its peers (Transport::announceFailure).
  void blame(int rank, bool stalled) {
    if (blamed_ < 0) blamed_ = rank, blamedStalled_ = stalled;
  }
  int blamed() const { return blamed_; }
  bool blamedStalled() const { return blamedStalled_; }

  // Calls ready() until it returns true, the deadline passes, abort is raised, or - checked once per
  // sleep slice - deadPeer() names a rank we wait for whose process has exited (-1: none). A peer that
  // exited after handing over everything we need is no failure: ready() is asked first.
  // With `via` and `peer`: a wait on that one peer of via's. Past half the time left it tells the
  // peers so (Transport::announceWaiting), and that it waits no more when the wait ends in Ready.
  template <typename Ready, typename DeadPeer>
  __attribute__((always_inline)) WaitResult until(Ready&& ready, DeadPeer&& deadPeer, Transport* via = nullptr,
                                                  int peer = -1) {
    // The common case, inline: the chunk or the slot is there (no call per chunk on small ops).
#if defined(ZCOLL_WAIT_TRACE)
    const uint64_t begin = wait_trace::ticks();
    if (ready()) {
      wait_trace::record(begin, begin);
      return WaitResult::Ready;
    }
#else
    if (ready()) return WaitResult::Ready;
#endif
    bool announced = false;
    const WaitResult r = wait(ready, deadPeer, via, peer, &announced);
    if (announced && via && r == WaitResult::Ready) via->announceWaiting(-1);
#if defined(ZCOLL_WAIT_TRACE)
    wait_trace::record(begin, wait_trace::ticks());
#endif
    return r;
  }

 private:
  template <typename Ready, typename DeadPeer>
  __attribute__((noinline)) WaitResult wait(Ready& ready, DeadPeer& deadPeer, Transport* via, int peer,
                                            bool* announced) {
    // A short wait (the peer's next line is on its way) reads no clock: on the critical path a clock
    // read adds its cost to the op when the data lands. Not when ranks share cores: there the spin
    // must stay short.
    const int pre = policy_.spinNs >= kPreSpinMinNs ? kPreSpins : 0;
    for (int i = 0; i < pre; ++i) {
      ZCOLL_CPU_RELAX();
      if (ready()) return WaitResult::Ready;
    }
    const int64_t start = nowNs();
    if (deadlineNs_ == kUnset) deadlineNs_ = start + timeoutNs_;
    const int64_t announceAt = via && peer >= 0 ? start + (deadlineNs_ - start) / 2 : INT64_MAX;
    int64_t now = start;
    const int spins = policy_.spinNs > 0 ? 16 : 0;  // none asked (zcoll-sim's tasks): yield or sleep at once
    for (unsigned iter = 0;; ++iter) {
      for (int i = 0; i < spins; ++i) {
        ZCOLL_CPU_RELAX();
        if (ready()) return WaitResult::Ready;
      }
      if ((iter & 7) == 0) {
        now = nowNs();
        if (abort_->load(std::memory_order_relaxed)) return WaitResult::Aborted;
        if (now >= deadlineNs_) return WaitResult::Timeout;
      }
      int64_t waited = now - start;
      if (waited < policy_.spinNs) continue;
      if (waited < policy_.spinNs + policy_.yieldNs) {
        sched_yield();
        if (ready()) return WaitResult::Ready;
        continue;
      }
      if (!transport_) {  // nothing rings for us (device work): short sleeps
        timespec ts{0, 20'000};
        nanosleep(&ts, nullptr);
        if (ready()) return WaitResult::Ready;
        now = nowNs();
        if (abort_->load(std::memory_order_relaxed)) return WaitResult::Aborted;
        if (now >= deadlineNs_) return WaitResult::Timeout;
        continue;
      }
      uint32_t token = transport_->prepareSleep();
      if (ready() || abort_->load(std::memory_order_relaxed)) {
        transport_->cancelSleep();
        return abort_->load(std::memory_order_relaxed) && !ready() ? WaitResult::Aborted : WaitResult::Ready;
      }
      transport_->sleep(token, std::min<int64_t>(50'000'000, std::max<int64_t>(0, deadlineNs_ - nowNs()) + 1));
      if (ready()) return WaitResult::Ready;
      now = nowNs();
      if (abort_->load(std::memory_order_relaxed)) return WaitResult::Aborted;
      if (now >= deadlineNs_) return WaitResult::Timeout;
      // Sleeping already: a syscall to ask whether a peer died costs nothing that matters.
      // Asked again after: the peer may have handed over what we wait for just before it exited.
      if ((deadPeer_ = deadPeer()) >= 0) return ready() ? WaitResult::Ready : WaitResult::PeerDied;
      if (via && now >= announceAt && !*announced) {
        via->announceWaiting(peer);
        *announced = true;
      }
    }
  }

  Transport* transport_;
  WaitPolicy policy_;
  static constexpr int64_t kUnset = INT64_MIN;
  static constexpr int kPreSpins = 8;
  static constexpr int64_t kPreSpinMinNs = 1'000;
  int64_t deadlineNs_ = kUnset;
  int64_t timeoutNs_ = 0;
  const std::atomic<bool>* abort_;
  int deadPeer_ = -1;
  int blamed_ = -1;
  bool blamedStalled_ = false;
};

}  // namespace zcoll
