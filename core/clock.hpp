// clock.hpp - monotonic time and deadlines; every bounded wait in zcoll is expressed with these.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>

namespace zcoll {

inline int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

class Deadline {
 public:
  static Deadline afterMs(int64_t ms) { return Deadline(nowNs() + ms * 1'000'000); }
  static Deadline atNs(int64_t ns) { return Deadline(ns); }
  int64_t ns() const { return ns_; }
  bool passed() const { return nowNs() >= ns_; }
  int64_t remainingNs() const { return std::max<int64_t>(0, ns_ - nowNs()); }
  // For poll(): at least 0, rounded up so that a wait does not end just before the deadline.
  int remainingMsForPoll(int64_t capMs = 100) const {
    return static_cast<int>(std::min<int64_t>(capMs, (remainingNs() + 999'999) / 1'000'000));
  }

 private:
  explicit Deadline(int64_t ns) : ns_(ns) {}
  int64_t ns_;
};

}  // namespace zcoll
