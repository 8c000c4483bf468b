// boundary.hpp - the C-ABI boundary: the one place where a Status becomes a zcollResult_t, the
// thread's last-error message is set, and exceptions stop. Every exported function is
// `return apiCall("zcollX", [&] { ... return Status; });`.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "core/status.hpp"
#include "zcoll/zcoll.h"

namespace zcoll {

zcollResult_t toResult(StatusCode code);
void setLastError(const char* function, const Status& status);
const char* lastError();

template <typename Body>
zcollResult_t apiCall(const char* function, Body&& body) noexcept {
  try {
    Status s = body();
    if (s) return zcollSuccess;
    setLastError(function, s);
    return toResult(s.code());
  } catch (const std::bad_alloc&) {
    setLastError(function, Status(StatusCode::System, "out of memory"));
    return zcollSystemError;
  } catch (const std::exception& e) {
    setLastError(function, Status(StatusCode::Internal, std::string("unexpected exception: ") + e.what()));
    return zcollInternalError;
  } catch (...) {
    setLastError(function, Status(StatusCode::Internal, "unexpected exception"));
    return zcollInternalError;
  }
}

}  // namespace zcoll
