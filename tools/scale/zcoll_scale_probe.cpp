// zcoll-scale-probe: one rank of tools/scale-probe's job. Creates a communicator from the environment
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), then runs a barrier and a checked 8-float all-reduce,
// and prints one line of what creation cost this rank: its wall time, RSS, descriptors, threads and the
// bootstrap's messages and bytes (rank 0 adds the rendezvous root's).
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "comm/handles.hpp"
#include "core/clock.hpp"
#include "zcoll/zcoll.h"

namespace {

// A field of /proc/self/status ("VmRSS", "VmHWM", "Threads"), in its own unit (kB or a count).
long procStatus(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') v = std::strtol(line + n + 1, nullptr, 10);
  std::fclose(f);
  return v;
}

int openDescriptors() {
  int count = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++count;
    ::closedir(d);
    --count;  // the directory's own
  }
  return count;
}

double realtimeS() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main() {
  const double start = realtimeS();
  zcollComm_t comm = nullptr;
  if (zcollResult_t r = zcollCommInitFromEnv(&comm, nullptr); r != zcollSuccess) {
    std::fprintf(stderr, "init failed: %s\n", zcollGetLastError(nullptr));
    return 1;
  }
  const double created = realtimeS();
  const long rss = procStatus("VmRSS"), threads = procStatus("Threads");
  const int fds = openDescriptors();
  int rank = 0, n = 0;
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &n);
  const zcoll::BootstrapStats boot = comm->impl->bootstrapStats();

  bool ok = zcollBarrier(comm, nullptr) == zcollSuccess;
  std::vector<float> v(8);
  for (int i = 0; i < 8; ++i) v[i] = static_cast<float>(rank + i);
  ok = ok && zcollAllReduce(v.data(), v.data(), v.size(), zcollFloat32, zcollSum, comm, nullptr) == zcollSuccess;
  for (int i = 0; i < 8 && ok; ++i)
    ok = v[i] == static_cast<float>(static_cast<double>(n) * (n - 1) / 2 + static_cast<double>(n) * i);
  const double done = realtimeS();
  const long rssAfter = procStatus("VmRSS"), hwm = procStatus("VmHWM");
  const int fdsAfter = openDescriptors();
  // start created done (CLOCK_REALTIME s), then the costs.
  std::printf("probe rank %d of %d start %.6f created %.6f done %.6f rss_kb %ld rss_after_kb %ld hwm_kb %ld fds %d "
              "fds_after %d threads %ld boot_msgs %lld boot_sent %lld boot_recv %lld root_sent %lld root_recv %lld "
              "check %s\n",
              rank, n, start, created, done, rss, rssAfter, hwm, fds, fdsAfter, threads,
              static_cast<long long>(boot.messagesSent + boot.messagesReceived),
              static_cast<long long>(boot.bytesSent), static_cast<long long>(boot.bytesReceived),
              static_cast<long long>(boot.rootBytesSent), static_cast<long long>(boot.rootBytesReceived),
              ok ? "ok" : "WRONG");
  zcollCommDestroy(comm);
  return ok ? 0 : 2;
}
