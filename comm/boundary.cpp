// boundary.cpp - Status -> zcollResult_t, last error, error strings.
#include "comm/boundary.hpp"

#include "core/log.hpp"

namespace zcoll {
namespace {
thread_local std::string tLastError;
}

zcollResult_t toResult(StatusCode code) {
  switch (code) {
    case StatusCode::Ok: return zcollSuccess;
    case StatusCode::InvalidArgument: return zcollInvalidArgument;
    case StatusCode::InvalidUsage: return zcollInvalidUsage;
    case StatusCode::NotSupported: return zcollNotSupported;
    case StatusCode::Timeout: return zcollTimeout;
    case StatusCode::RemoteError: return zcollRemoteError;
    case StatusCode::Aborted: return zcollAborted;
    case StatusCode::System: return zcollSystemError;
    case StatusCode::Internal: return zcollInternalError;
    case StatusCode::Device: return zcollUnhandledCudaError;
  }
  return zcollInternalError;
}

void setLastError(const char* function, const Status& status) {
  tLastError = fmt::format("{}: {}", function, status.message());
  ZCOLL_INFO(Api, -1, "{} failed ({}): {}", function, statusCodeName(status.code()), status.message());
}

const char* lastError() { return tLastError.c_str(); }

}  // namespace zcoll

extern "C" const char* zcollGetErrorString(zcollResult_t result) {
  switch (result) {
    case zcollSuccess: return "no error";
    case zcollUnhandledCudaError: return "unhandled cuda error";
    case zcollSystemError: return "unhandled system error (see zcollGetLastError)";
    case zcollInternalError: return "internal error - please report this issue";
    case zcollInvalidArgument: return "invalid argument";
    case zcollInvalidUsage: return "invalid usage";
    case zcollRemoteError: return "remote process exited or there was a network error";
    case zcollInProgress: return "zcoll operation in progress";
    case zcollTimeout: return "timeout: a peer did not answer in time";
    case zcollAborted: return "communicator aborted";
    case zcollNotSupported: return "not supported";
    case zcollNumResults: break;
  }
  return "unknown result code";
}

extern "C" const char* zcollGetLastError(zcollComm_t) { return zcoll::lastError(); }
