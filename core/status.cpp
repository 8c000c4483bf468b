// status.cpp - names of status codes and the errno-carrying constructor.
#include "core/status.hpp"

#include <cstring>

namespace zcoll {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::Ok: return "ok";
    case StatusCode::InvalidArgument: return "invalid argument";
    case StatusCode::InvalidUsage: return "invalid usage";
    case StatusCode::NotSupported: return "not supported";
    case StatusCode::Timeout: return "timeout";
    case StatusCode::RemoteError: return "remote error";
    case StatusCode::Aborted: return "aborted";
    case StatusCode::System: return "system error";
    case StatusCode::Internal: return "internal error";
    case StatusCode::Device: return "device (CUDA) error";
  }
  return "unknown";
}

Status systemError(std::string_view what, int err) {
  char buf[128];
  const char* text = strerror_r(err, buf, sizeof buf);  // GNU variant
  return Status(StatusCode::System, fmt::format("{} failed: {} (errno {})", what, text, err));
}

}  // namespace zcoll
