// zcoll_run.cpp - zcoll-run: starts N local ranks of a program, torchrun-style.
//
//   zcoll-run -n N [--tag-output] [--timeout SEC] [--bind none|auto|core|numa|package] [--report-bindings] PROG ARGS...
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free
// MASTER_PORT and a fresh ZCOLL_BOOTSTRAP_SECRET, so zcollCommInitFromEnv joins them into one job.
// If a rank fails (non-zero exit or a signal) the others get SIGTERM, then SIGKILL after a grace
// period, and zcoll-run exits with the failing rank's status (128 + signal for a signal).
// SIGINT/SIGTERM/SIGHUP are forwarded to every rank; a rank dies with zcoll-run even when zcoll-run is
// SIGKILLed (PR_SET_PDEATHSIG). --tag-output prefixes each line with [rank].
// --bind pins each rank to its own core / NUMA node / package (hwloc; tools/launcher/binding.hpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/launcher/binding.hpp"

namespace {

constexpr int kMaxRanks = 4096;
pid_t gChildren[kMaxRanks];
volatile sig_atomic_t gNumChildren = 0;
volatile sig_atomic_t gForwarded = 0;

void forward(int sig) {
  gForwarded = sig;
  for (int i = 0; i < gNumChildren; ++i)
    if (gChildren[i] > 0) kill(gChildren[i], sig);
}

void usage(FILE* f) {
  std::fprintf(f,
               "usage: zcoll-run -n N [--tag-output] [--timeout SEC] PROG [ARGS...]\n"
               "  starts N local ranks of PROG with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,\n"
               "  MASTER_ADDR, MASTER_PORT and ZCOLL_BOOTSTRAP_SECRET set (zcollCommInitFromEnv reads them).\n"
               "  --tag-output   prefix every output line with [rank]\n"
               "  --timeout SEC  stop all ranks (and fail) after SEC seconds\n"
               "  --bind KIND    pin rank r to the (r mod count)-th core, numa node or package of the CPUs\n"
               "                 this launcher may use (hwloc; default none); auto: a core each unless\n"
               "                 there are more ranks than cores (mpirun's default)\n"
               "  --report-bindings  print where each rank is pinned\n");
}

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

std::string randomHex() {
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) return {};
  std::string s;
  char buf[3];
  for (unsigned char c : b) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    s += buf;
  }
  return s;
}

// Line-buffered relay of one child's stream with a [rank] prefix.
struct Relay {
  int fd = -1;
  int rank = 0;
  FILE* out = nullptr;
  std::string partial;

  bool pump() {  // false at EOF
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    if (n <= 0) {
      if (!partial.empty()) std::fprintf(out, "[%d] %s\n", rank, partial.c_str());
      partial.clear();
      std::fflush(out);
      close(fd);
      fd = -1;
      return false;
    }
    partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = partial.find('\n')) != std::string::npos) {
      std::fprintf(out, "[%d] %.*s\n", rank, static_cast<int>(nl), partial.data());
      partial.erase(0, nl + 1);
    }
    std::fflush(out);
    return true;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  bool tag = false;
  double timeoutSec = 0;
  std::string bind = "none";
  bool reportBindings = false;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-n" || a == "--np" || a == "-np") {
      if (i + 1 >= argc) { usage(stderr); return 2; }
      char* end = nullptr;
      long v = std::strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > kMaxRanks) {
        std::fprintf(stderr, "zcoll-run: -n %s: expected 1..%d ranks\n", argv[i], kMaxRanks);
        return 2;
      }
      n = static_cast<int>(v);
    } else if (a == "--tag-output") {
      tag = true;
    } else if (a == "--timeout") {
      if (i + 1 >= argc) { usage(stderr); return 2; }
      char* end = nullptr;
      const char* text = argv[++i];
      timeoutSec = std::strtod(text, &end);
      if (end == text || *end || !(timeoutSec > 0) || timeoutSec > 1e7) {
        std::fprintf(stderr, "zcoll-run: --timeout %s: expected seconds > 0\n", text);
        return 2;
      }
    } else if (a == "--bind") {
      if (i + 1 >= argc) { usage(stderr); return 2; }
      bind = argv[++i];
    } else if (a == "--report-bindings") {
      reportBindings = true;
    } else if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--") {
      ++i;
      break;
    } else if (a[0] == '-') {
      std::fprintf(stderr, "zcoll-run: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    } else {
      break;
    }
  }
  if (n == 0 || i >= argc) {
    usage(stderr);
    return 2;
  }
  std::vector<zcoll::launcher::Binding> bindings;
  std::string bindError;
  if (!zcoll::launcher::planBinding(bind, n, &bindings, &bindError)) {
    std::fprintf(stderr, "zcoll-run: %s\n", bindError.c_str());
    return 2;
  }
  if (reportBindings)
    for (int r = 0; r < n; ++r)
      std::fprintf(stderr, "zcoll-run: rank %d %s\n", r,
                   bindings.empty() ? "not bound (--bind none)"
                                    : ("bound to " + bindings[static_cast<size_t>(r)].object + ": CPUs " +
                                       bindings[static_cast<size_t>(r)].cpus).c_str());
  int port = freePort();
  std::string secret = randomHex();
  if (port < 0 || secret.empty()) {
    std::perror("zcoll-run: cannot pick a port");
    return 2;
  }

  struct sigaction sa{};
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);

  // SIGCHLD as a file descriptor, polled with the output pipes.
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int childFd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  if (childFd < 0) {
    std::perror("zcoll-run: signalfd");
    return 2;
  }

  std::vector<Relay> relays;
  std::fflush(nullptr);
  for (int rank = 0; rank < n; ++rank) {
    int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
    if (tag && (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0)) {
      std::perror("zcoll-run: pipe");
      forward(SIGKILL);
      return 2;
    }
    sigprocmask(SIG_BLOCK, &block, &old);  // no forwarding while the table is inconsistent
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
      // The ranks die with zcoll-run, whatever kills it (SIGKILL included): no orphans.
      if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      sigprocmask(SIG_UNBLOCK, &chld, nullptr);
      struct sigaction dfl{};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &dfl, nullptr);
      if (tag) {
        dup2(outPipe[1], STDOUT_FILENO);
        dup2(errPipe[1], STDERR_FILENO);
      }
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("ZCOLL_BOOTSTRAP_SECRET", secret.c_str(), 1);
      if (!bindings.empty() && !zcoll::launcher::applyBinding(bindings[static_cast<size_t>(rank)])) {
        std::fprintf(stderr, "zcoll-run: rank %d: binding to CPUs %s: %s\n", rank,
                     bindings[static_cast<size_t>(rank)].cpus.c_str(), std::strerror(errno));
        _exit(127);
      }
      execvp(argv[i], argv + i);
      std::fprintf(stderr, "zcoll-run: cannot run %s: %s\n", argv[i], std::strerror(errno));
      _exit(127);
    }
    if (pid > 0) {
      gChildren[gNumChildren] = pid;
      gNumChildren = gNumChildren + 1;
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) {
      std::perror("zcoll-run: fork");
      forward(SIGKILL);
      return 2;
    }
    if (tag) {
      close(outPipe[1]);
      close(errPipe[1]);
      relays.push_back({outPipe[0], rank, stdout, {}});
      relays.push_back({errPipe[0], rank, stderr, {}});
    }
  }

  int result = 0;
  int alive = n;
  auto seconds = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const double start = seconds();
  double killAt = -1;
  // A child's exit wakes the loop at once (signalfd), so the first rank to fail is the one reported,
  // not a survivor that noticed the death a moment later.
  while (alive > 0 || !relays.empty()) {
    std::vector<pollfd> fds;
    for (Relay& r : relays) fds.push_back({r.fd, POLLIN, 0});
    fds.push_back({childFd, POLLIN, 0});
    poll(fds.data(), fds.size(), 20);
    for (size_t k = 0; k + 1 < fds.size(); ++k)
      if (fds[k].revents) relays[k].pump();
    if (fds.back().revents) {
      signalfd_siginfo info[16];
      while (read(childFd, info, sizeof info) > 0) {
      }
    }
    std::erase_if(relays, [](const Relay& r) { return r.fd < 0; });

    int status = 0;
    pid_t pid;
    while (alive > 0 && (pid = waitpid(-1, &status, WNOHANG)) > 0) {
      int rank = -1;
      for (int k = 0; k < gNumChildren; ++k)
        if (gChildren[k] == pid) {
          rank = k;
          gChildren[k] = -1;
        }
      if (rank < 0) continue;
      --alive;
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (code != 0 && result == 0) {
        result = code;
        if (WIFSIGNALED(status) && !gForwarded)
          std::fprintf(stderr, "zcoll-run: rank %d (pid %d) killed by signal %d; stopping the other ranks\n", rank,
                       pid, WTERMSIG(status));
        else if (!gForwarded)
          std::fprintf(stderr, "zcoll-run: rank %d (pid %d) exited with status %d; stopping the other ranks\n",
                       rank, pid, code);
        forward(SIGTERM);
        killAt = seconds() + 3.0;
      }
    }
    if (timeoutSec > 0 && seconds() - start > timeoutSec && result == 0 && alive > 0) {
      std::fprintf(stderr, "zcoll-run: --timeout %g s reached; stopping all ranks\n", timeoutSec);
      result = 124;
      forward(SIGTERM);
      killAt = seconds() + 3.0;
    }
    if (killAt > 0 && seconds() > killAt && alive > 0) {
      forward(SIGKILL);
      killAt = -1;
    }
  }
  if (gForwarded && result == 0) result = 128 + gForwarded;
  return result;
}
