// epoll_sleeper.hpp - how a transport whose events arrive on file descriptors (tcp's sockets, UCX's
// worker event fd) sleeps: an epoll set plus an eventfd that wake() signals from any thread.
#pragma once

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "core/socket.hpp"
#include "core/status.hpp"

namespace zcoll {

class EpollSleeper {
 public:
  Status init() {
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    event_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!epoll_.valid() || !event_.valid()) return systemError("epoll_create1/eventfd", errno);
    return add(event_.get(), EPOLLIN);
  }
  Status add(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return systemError("epoll_ctl", errno);
    return Status::ok();
  }
  // The epoll set's descriptor: readable while one of the set's events is pending.
  int fd() const { return epoll_.get(); }
  // Returns on an event of the set, a wake(), or after maxNs.
  void sleep(int64_t maxNs) {
    epoll_event events[16];
    const timespec ts{static_cast<time_t>(maxNs / 1'000'000'000), static_cast<long>(maxNs % 1'000'000'000)};
    const int n = ::epoll_pwait2(epoll_.get(), events, 16, &ts, nullptr);
    for (int i = 0; i < n; ++i)
      if (events[i].data.fd == event_.get()) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = ::read(event_.get(), &v, sizeof v);
      }
  }
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(event_.get(), &one, sizeof one);
  }

 private:
  Fd epoll_, event_;
};

}  // namespace zcoll
