// run_command.hpp - runs a shell command for the process-level tests and collects what it printed
// (stdout and stderr together), its exit status and how long it took.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace zcoll::test {

struct CommandResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out;
  double seconds = 0;
};

inline CommandResult runCommand(const std::string& cmd) {
  const auto start = std::chrono::steady_clock::now();
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace zcoll::test
