// status.hpp - zcoll's one internal error model.
//
// Every internal function that can fail returns a [[nodiscard]] Status: a code and a message.
// The message is built where the error is first seen (it names the argument, the peer, the errno);
// callers add context with withContext(). Status is translated to zcollResult_t in exactly one
// place (comm/boundary.hpp). Ok carries no allocation: a Status is one pointer, null when ok (every
// op passes a dozen of them up and down; an error's code and message live behind the pointer).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace zcoll {

enum class StatusCode {
  Ok,
  InvalidArgument,
  InvalidUsage,
  NotSupported,
  Timeout,
  RemoteError,
  Aborted,
  System,
  Internal,
  Device,  // a CUDA (or emulated device) call failed; the message has the runtime's error
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  // An error (code Ok keeps no message).
  Status(StatusCode code, std::string message)
      : rep_(code == StatusCode::Ok ? nullptr : new Rep{code, std::move(message)}) {}
  Status(const Status& o) : rep_(o.rep_ ? new Rep(*o.rep_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) rep_.reset(o.rep_ ? new Rep(*o.rep_) : nullptr);
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status ok() { return {}; }

  bool isOk() const { return rep_ == nullptr; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::Ok; }
  const std::string& message() const { return rep_ ? rep_->message : kNoMessage; }

  // "what we were doing: original message"
  Status withContext(std::string_view context) && {
    if (rep_) rep_->message = fmt::format("{}: {}", context, rep_->message);
    return std::move(*this);
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  static inline const std::string kNoMessage{};
  std::unique_ptr<Rep> rep_;
};

template <typename... Args>
Status makeStatus(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status invalidArgument(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::InvalidArgument, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status invalidUsage(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::InvalidUsage, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status notSupported(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::NotSupported, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status timeoutError(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::Timeout, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status remoteError(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::RemoteError, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status deviceError(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::Device, f, std::forward<Args>(args)...);
}
template <typename... Args>
Status internalError(fmt::format_string<Args...> f, Args&&... args) {
  return makeStatus(StatusCode::Internal, f, std::forward<Args>(args)...);
}

// A failed OS call: the message carries the call, errno's text and the context.
Status systemError(std::string_view what, int err);

}  // namespace zcoll
