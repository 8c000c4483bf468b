// log.hpp - logging through spdlog, by level and subsystem.
//
// ZCOLL_DEBUG=WARN|INFO|TRACE sets the level, ZCOLL_DEBUG_SUBSYS picks subsystems, ZCOLL_DEBUG_FILE
// the destination. Lines carry host, pid and (where known) rank. The checks are a relaxed atomic load,
// so a disabled log line costs nothing but the test; only log.cpp includes spdlog.
#pragma once

#include <atomic>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "core/config.hpp"

namespace zcoll {

enum class Subsys : int { Init = 0, Boot, Coll, Shm, Api, Count };

namespace detail {
extern std::atomic<int> gLogLevel;  // LogLevel, -1 before initialisation
extern std::atomic<unsigned> gLogSubsysMask;
void logInit();
void logWrite(LogLevel level, Subsys subsys, int rank, std::string_view message);
}  // namespace detail

inline bool logEnabled(LogLevel level, Subsys subsys) {
  int current = detail::gLogLevel.load(std::memory_order_relaxed);
  if (current < 0) {
    detail::logInit();
    current = detail::gLogLevel.load(std::memory_order_relaxed);
  }
  return static_cast<int>(level) <= current &&
         (detail::gLogSubsysMask.load(std::memory_order_relaxed) & (1u << static_cast<int>(subsys)));
}

namespace detail {
template <typename... Args>
void logFormatted(LogLevel level, Subsys subsys, int rank, fmt::format_string<Args...> f, Args&&... args) {
  logWrite(level, subsys, rank, fmt::format(f, std::forward<Args>(args)...));
}
}  // namespace detail

// The macros test the level before the arguments are evaluated: a disabled line on a hot path
// costs the test only, not the names and values it would print.
#define ZCOLL_LOG_AT(level, subsys, rank, ...)                                                        \
  (::zcoll::logEnabled(level, ::zcoll::Subsys::subsys)                                              \
       ? ::zcoll::detail::logFormatted(level, ::zcoll::Subsys::subsys, rank, __VA_ARGS__) \
       : void())

#define ZCOLL_WARN(subsys, rank, ...) ZCOLL_LOG_AT(::zcoll::LogLevel::Warn, subsys, rank, __VA_ARGS__)
#define ZCOLL_INFO(subsys, rank, ...) ZCOLL_LOG_AT(::zcoll::LogLevel::Info, subsys, rank, __VA_ARGS__)
#define ZCOLL_TRACE(subsys, rank, ...) ZCOLL_LOG_AT(::zcoll::LogLevel::Trace, subsys, rank, __VA_ARGS__)

}  // namespace zcoll
