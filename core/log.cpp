// log.cpp - the process-wide spdlog logger behind log.hpp.
#include "core/log.hpp"

#include <unistd.h>

#include <mutex>
#include <string>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace zcoll::detail {

std::atomic<int> gLogLevel{-1};
std::atomic<unsigned> gLogSubsysMask{~0u};

namespace {

constexpr const auto& kSubsysNames = kLogSubsystems;
static_assert(std::size(kSubsysNames) == static_cast<size_t>(Subsys::Count));

std::once_flag gInitOnce;
std::shared_ptr<spdlog::logger> gLogger;
std::string gHost;

std::string expandFile(std::string path) {
  for (size_t i = 0; (i = path.find('%', i)) != std::string::npos;) {
    if (i + 1 >= path.size()) break;
    std::string rep = path[i + 1] == 'h' ? gHost : path[i + 1] == 'p' ? std::to_string(getpid()) : std::string();
    if (rep.empty()) { ++i; continue; }
    path.replace(i, 2, rep);
    i += rep.size();
  }
  return path;
}

void initOnce() {
  LogSettings s = readLogSettings();
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  gHost = host;
  if (!s.subsystems.empty()) {
    unsigned mask = 0;
    std::string_view list(s.subsystems);
    while (!list.empty()) {
      const std::string_view item = nextListItem(&list);
      for (size_t i = 0; i < std::size(kSubsysNames); ++i)
        if (item == kSubsysNames[i] || item == "all") mask |= 1u << i;
    }
    gLogSubsysMask.store(mask, std::memory_order_relaxed);
  }
  std::string fileError;
  try {
    gLogger = s.file.empty() ? spdlog::stderr_logger_mt("zcoll")
                             : spdlog::basic_logger_mt("zcoll", expandFile(s.file));
  } catch (const std::exception& e) {
    fileError = e.what();
    gLogger = spdlog::stderr_logger_mt("zcoll-fallback");
  }
  gLogger->set_pattern("%H:%M:%S.%f %v");
  gLogger->set_level(spdlog::level::trace);
  gLogger->flush_on(spdlog::level::trace);
  gLogLevel.store(static_cast<int>(s.level), std::memory_order_relaxed);
  // A log file that cannot be written must not swallow the warnings: they go to stderr, and say why.
  if (!fileError.empty() && s.level >= LogLevel::Warn)
    logWrite(LogLevel::Warn, Subsys::Init, -1,
             fmt::format("ZCOLL_DEBUG_FILE='{}' cannot be written ({}); logging to stderr", s.file, fileError));
}

}  // namespace

void logInit() { std::call_once(gInitOnce, initOnce); }

void logWrite(LogLevel level, Subsys subsys, int rank, std::string_view message) {
  static constexpr std::string_view kLevel[] = {"", "WARN", "INFO", "TRACE"};
  std::string_view name = kSubsysNames[static_cast<int>(subsys)];
  if (rank >= 0)
    gLogger->info("{}:{}:r{} zcoll {} {}: {}", gHost, getpid(), rank, kLevel[static_cast<int>(level)], name, message);
  else
    gLogger->info("{}:{} zcoll {} {}: {}", gHost, getpid(), kLevel[static_cast<int>(level)], name, message);
}

}  // namespace zcoll::detail
