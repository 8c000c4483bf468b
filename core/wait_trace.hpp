// wait_trace.hpp - every wait of this process in TSC ticks, for tools/sched-probe --waits, which sets
// them beside the scheduler's trace (ftrace's x86-tsc clock) to see what each rank did in each turn
// on a shared core. A diagnostic: Waiter records only in a build with meson's -Dwait_trace=true, and
// only where ZCOLL_WAIT_TRACE names a directory; ZCOLL_TRACE's events cost too much for this (a third
// of a 6-rank ring's op at 64 B), a record here is a tick read and a store.
//
// A record is {begin, end} of one Waiter::until (equal: it found its condition at once), or {t, 0}:
// an op began (a communicator's Waiter was made). Records go into a buffer mapped (and its pages
// touched) at the first one, those past its capacity are dropped, and the buffer is written at exit
// to DIR/PID.bin as pairs of little-endian uint64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/clock.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace zcoll::wait_trace {

struct Record {
  uint64_t begin, end;
};

// The time stamp counter (elsewhere: nowNs(), which no ftrace clock prints finely).
inline uint64_t ticks() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(nowNs());
#endif
}

class Log {
 public:
  // Maps room for `capacity` records (touched now: no page fault in a timed loop); none if that fails.
  explicit Log(size_t capacity);
  ~Log();
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;

  void add(uint64_t begin, uint64_t end) {
    if (size_ < capacity_) records_[size_++] = Record{begin, end};
  }
  size_t size() const { return size_; }
  // Writes the records to `path`; false if it cannot.
  bool write(const std::string& path) const;

 private:
  Record* records_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

inline constexpr size_t kCapacity = size_t{1} << 22;  // 64 MiB: a 2.5-s loop of 8 ranks at ~30 waits per op

namespace detail {
extern Log* current;
extern bool asked;
Log* open();
}  // namespace detail

// This process's log: null unless ZCOLL_WAIT_TRACE names a directory (read at the first call), else
// one of kCapacity records written to DIR/PID.bin at exit. A child forked later opens its own at its
// first record. One thread per process records (zcoll-bench's ranks): the log takes no lock.
inline Log* processLog() { return detail::asked ? detail::current : detail::open(); }

inline void record(uint64_t begin, uint64_t end) {
  if (Log* log = processLog()) log->add(begin, end);
}

}  // namespace zcoll::wait_trace
