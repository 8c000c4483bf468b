// membarrier.cpp - see membarrier.hpp.
#include "core/membarrier.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace zcoll {
namespace {

long membarrier(int cmd) { return ::syscall(SYS_membarrier, cmd, 0, 0); }

// Registration for one command, per process: a child of fork() registers again (the kernel keeps
// the state with the address space, which the child does not share).
class Registration {
 public:
  Registration(int cmd, int registerCmd) : cmd_(cmd), registerCmd_(registerCmd) {}
  bool available() {
    const int pid = ::getpid();
    if (pid_.load(std::memory_order_acquire) == pid) return ok_.load(std::memory_order_relaxed);
    const long mask = membarrier(MEMBARRIER_CMD_QUERY);
    const bool ok = mask > 0 && (mask & cmd_) != 0 && (mask & registerCmd_) != 0 && membarrier(registerCmd_) == 0;
    ok_.store(ok, std::memory_order_relaxed);
    pid_.store(pid, std::memory_order_release);
    return ok;
  }
  // After available(): the fence. Registered, it fails only for want of kernel memory (ENOMEM:
  // tried again) or a registration lost (registered again); then a full fence of this thread is
  // all that is left, and false.
  bool barrier() {
    for (int attempt = 0; attempt < 8; ++attempt) {
      if (membarrier(cmd_) == 0) return true;
      if (errno == EPERM) {
        if (membarrier(registerCmd_) != 0) break;
      } else if (errno != ENOMEM && errno != EINTR && errno != EAGAIN) {
        break;
      }
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return false;
  }

 private:
  const int cmd_, registerCmd_;
  std::atomic<int> pid_{0};
  std::atomic<bool> ok_{false};
};

Registration& processRegistration() {
  static Registration r(MEMBARRIER_CMD_PRIVATE_EXPEDITED, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED);
  return r;
}

Registration& hostRegistration() {
  static Registration r(MEMBARRIER_CMD_GLOBAL_EXPEDITED, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
  return r;
}

}  // namespace

bool processBarrierAvailable() { return processRegistration().available(); }
bool processBarrier() { return processRegistration().barrier(); }
bool hostBarrierAvailable() { return hostRegistration().available(); }
bool hostBarrier() { return hostRegistration().barrier(); }

}  // namespace zcoll
