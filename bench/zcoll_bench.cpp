// zcoll_bench.cpp - zcoll-bench: nccl-tests-style sweep of one collective (see bench/engine.hpp).
// With -p N it starts N local ranks itself (fork), pinned as mpirun would (--bind); otherwise it
// joins a launcher's job.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/engine.hpp"
#include "tools/launcher/binding.hpp"

namespace {

int runRank(zcollComm_t comm, const zcoll::bench::Args& args) {
  if (args.calibrate) {
    zcoll::bench::printChoices(comm, args, stdout);
    zcollCommDestroy(comm);
    return 0;
  }
  long long wrong = args.algo == "all" ? zcoll::bench::runAll(comm, args, stdout) : zcoll::bench::run(comm, args, stdout);
  std::fflush(stdout);
  zcollCommDestroy(comm);
  return wrong < 0 ? 3 : (wrong > 0 ? 1 : 0);
}

// Forks the ranks before any thread exists (a fork while another thread holds a lock can leave the
// child stuck), then creates the unique id here and hands it to every rank through a pipe.
int spawnLocal(const zcoll::bench::Args& args, const zcollConfig_t& config) {
  std::fflush(stdout);
  // Pinned like mpirun's ranks (its default binds to cores while they suffice): an unpinned pair
  // migrates between cores and measured up to 2x slower at 32 KiB here.
  std::vector<zcoll::launcher::Binding> bindings;
  std::string bindError;
  if (!zcoll::launcher::planBinding(args.bind, args.nranks, &bindings, &bindError)) {
    std::fprintf(stderr, "zcoll-bench: %s\n", bindError.c_str());
    return 2;
  }
  std::vector<pid_t> children;
  std::vector<int> pipes;
  auto killAll = [&] {
    for (pid_t c : children) kill(c, SIGKILL);
  };
  for (int rank = 0; rank < args.nranks; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("zcoll-bench: pipe");
      killAll();
      return 3;
    }
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("zcoll-bench: fork");
      killAll();
      return 3;
    }
    if (pid == 0) {
      if (!bindings.empty() && !zcoll::launcher::applyBinding(bindings[static_cast<size_t>(rank)])) {
        std::fprintf(stderr, "zcoll-bench: rank %d: binding to CPUs %s: %s\n", rank,
                     bindings[static_cast<size_t>(rank)].cpus.c_str(), std::strerror(errno));
        std::_Exit(3);
      }
      close(fds[1]);
      for (int w : pipes) close(w);
      zcollUniqueId id;
      size_t got = 0;
      while (got < sizeof id) {
        ssize_t n = read(fds[0], reinterpret_cast<char*>(&id) + got, sizeof id - got);
        if (n <= 0) std::_Exit(3);  // the parent failed before sending the id
        got += static_cast<size_t>(n);
      }
      close(fds[0]);
      zcollComm_t comm = nullptr;
      if (zcollCommInitRankConfig(&comm, args.nranks, id, rank, &config) != zcollSuccess) {
        std::fprintf(stderr, "zcoll-bench: rank %d: %s\n", rank, zcollGetLastError(nullptr));
        std::exit(3);
      }
      std::exit(runRank(comm, args));
    }
    close(fds[0]);
    children.push_back(pid);
    pipes.push_back(fds[1]);
  }
  zcollUniqueId id;
  if (zcollGetUniqueId(&id) != zcollSuccess) {
    std::fprintf(stderr, "zcoll-bench: %s\n", zcollGetLastError(nullptr));
    killAll();
    return 3;
  }
  for (int w : pipes) {
    if (write(w, &id, sizeof id) != static_cast<ssize_t>(sizeof id)) std::perror("zcoll-bench: write");
    close(w);
  }
  int result = 0;
  size_t left = children.size();
  while (left > 0) {
    int status = 0;
    pid_t pid = wait(&status);
    if (pid < 0) break;
    --left;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      result = code;
      for (pid_t c : children)
        if (c != pid) kill(c, SIGTERM);  // one rank failed: the others cannot finish
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  zcoll::bench::Args args;
  std::string error;
  if (!zcoll::bench::parseArgs(argc, argv, &args, &error)) {
    if (!error.empty()) std::fprintf(stderr, "zcoll-bench: %s\n", error.c_str());
    zcoll::bench::printUsage(error.empty() ? stdout : stderr, argv[0]);
    return error.empty() ? 0 : 2;
  }
  if (args.calibrate) setenv("ZCOLL_CALIBRATE", "2", 1);  // read by every rank's config
  zcollConfig_t config = ZCOLL_CONFIG_INITIALIZER;
  const std::string rule = args.algo == "all" ? std::string() : zcoll::bench::algoRule(args, args.algo);
  if (!rule.empty()) config.algo = rule.c_str();
  if (args.nranks > 0) return spawnLocal(args, config);
  zcollComm_t comm = nullptr;
  if (zcollCommInitFromEnv(&comm, &config) != zcollSuccess) {
    std::fprintf(stderr, "zcoll-bench: %s\n(without -p, zcoll-bench joins a job started by zcoll-run, torchrun, "
                 "mpirun or srun)\n", zcollGetLastError(nullptr));
    return 3;
  }
  return runRank(comm, args);
}
