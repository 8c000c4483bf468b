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

#include "comm/config.hpp"

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

template <typename... Args>
void logAt(LogLevel level, Subsys subsys, int rank, fmt::format_string<Args...> f, Args&&... args) {
  if (logEnabled(level, subsys)) detail::logWrite(level, subsys, rank, fmt::format(f, std::forward<Args>(args)...));
}

#define ZCOLL_WARN(subsys, rank, ...) ::zcoll::logAt(::zcoll::LogLevel::Warn, ::zcoll::Subsys::subsys, rank, __VA_ARGS__)
#define ZCOLL_INFO(subsys, rank, ...) ::zcoll::logAt(::zcoll::LogLevel::Info, ::zcoll::Subsys::subsys, rank, __VA_ARGS__)
#define ZCOLL_TRACE(subsys, rank, ...) ::zcoll::logAt(::zcoll::LogLevel::Trace, ::zcoll::Subsys::subsys, rank, __VA_ARGS__)

}  // namespace zcoll
