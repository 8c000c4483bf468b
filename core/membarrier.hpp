// membarrier.hpp - asymmetric fences through Linux's membarrier(2).
//
// A store-then-load handshake (Dekker: "I publish, then I look whether you sleep" against "I say I
// sleep, then I look whether something was published") needs a full fence on both sides. When one
// side is rare (a rank about to sleep, a communicator being destroyed), that side can pay for both:
// it calls membarrier, which makes every running thread of the process (processBarrier) or of every
// registered process on the host (hostBarrier) execute a full fence, and the frequent side needs a
// compiler barrier only - no locked instruction, no store-buffer drain on the path of every op.
//
// Each is usable only where the kernel offers and registration succeeded (Linux 4.14 / 4.16, and no
// seccomp filter refusing it); callers keep the fenced protocol otherwise.
#pragma once

namespace zcoll {

// Whether processBarrier() works in this process (registers on the first call in each process;
// thread-safe).
bool processBarrierAvailable();
// A full fence on every running thread of this process (MEMBARRIER_CMD_PRIVATE_EXPEDITED); false if
// the kernel refused it even after registering again and retrying (then only this thread fenced,
// and the caller must not count on the others).
bool processBarrier();

// Whether hostBarrier() works and this process receives other processes' hostBarrier()s.
bool hostBarrierAvailable();
// A full fence on every running thread of every process on this host that registered through
// hostBarrierAvailable() (MEMBARRIER_CMD_GLOBAL_EXPEDITED; it interrupts the CPUs running them, and
// the kernel serialises such calls host-wide: for rare events only). False as processBarrier().
bool hostBarrier();

// The frequent side: orders the compiler only; the other side's membarrier orders the CPU.
inline void lightBarrier() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

}  // namespace zcoll
