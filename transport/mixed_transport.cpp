// mixed_transport.cpp - see mixed_transport.hpp.
#include "transport/mixed_transport.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <fmt/format.h>

namespace zcoll {

Status MixedTransport::create(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote,
                              std::vector<uint8_t> viaLocal, std::unique_ptr<Transport>* out) {
  if (local->pollFd() < 0 || remote->pollFd() < 0)
    return internalError("mixed transport: {} and {} must both sleep on descriptors", local->name(), remote->name());
  std::unique_ptr<MixedTransport> t(new MixedTransport());
  t->wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!t->wake_.valid()) return systemError("mixed transport: eventfd", errno);
  t->name_ = fmt::format("{}+{}", local->name(), remote->name());
  t->capacity_ = std::min(local->chunkCapacity(), remote->chunkCapacity());
  t->slots_ = std::min(local->slotsPerPeer(), remote->slotsPerPeer());
  t->local_ = std::move(local);
  t->remote_ = std::move(remote);
  t->viaLocal_ = std::move(viaLocal);
  *out = std::move(t);
  return Status::ok();
}

uint32_t MixedTransport::prepareSleep() {
  localToken_ = local_->prepareSleep();
  remoteToken_ = remote_->prepareSleep();
  return 0;
}

void MixedTransport::cancelSleep() {
  local_->cancelSleep();
  remote_->cancelSleep();
}

void MixedTransport::sleep(uint32_t, int64_t maxNs) {
  pollfd fds[3] = {{local_->pollFd(), POLLIN, 0}, {remote_->pollFd(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
  const timespec ts{static_cast<time_t>(maxNs / 1'000'000'000), static_cast<long>(maxNs % 1'000'000'000)};
  ::ppoll(fds, 3, &ts, nullptr);
  if (fds[2].revents) {
    uint64_t v;
    [[maybe_unused]] ssize_t r = ::read(wake_.get(), &v, sizeof v);
  }
  local_->sleep(localToken_, 0);
  remote_->sleep(remoteToken_, 0);
}

void MixedTransport::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t r = ::write(wake_.get(), &one, sizeof one);
}

}  // namespace zcoll
