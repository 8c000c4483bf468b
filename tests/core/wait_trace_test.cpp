// wait_trace_test.cpp - the wait log behind tools/sched-probe --waits (core/wait_trace.hpp): records kept
// up to its capacity, written as pairs of uint64, and a forked child's own log written at its exit to
// the directory ZCOLL_WAIT_TRACE names.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/wait_trace.hpp"

namespace zcoll::wait_trace {
namespace {

std::vector<Record> readRecords(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<Record> out(bytes.size() / sizeof(Record));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(Record));
  return out;
}

// The file at `path` holds exactly `want`; it is removed.
void expectRecords(const std::string& path, const std::vector<Record>& want) {
  const std::vector<Record> back = readRecords(path);
  ASSERT_EQ(back.size(), want.size()) << path;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(back[i].begin, want[i].begin) << "record " << i;
    EXPECT_EQ(back[i].end, want[i].end) << "record " << i;
  }
  std::remove(path.c_str());
}

std::string tempDir() {
  char name[] = "/tmp/zcoll-wait-trace-XXXXXX";
  const char* dir = mkdtemp(name);
  return dir ? dir : "";
}

TEST(WaitTrace, KeepsRecordsUpToItsCapacityAndWritesThem) {
  Log log(2);
  log.add(1, 2);
  log.add(3, 3);
  log.add(5, 0);  // past the capacity: dropped
  ASSERT_EQ(log.size(), 2u);
  const std::string dir = tempDir();
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/log.bin";
  ASSERT_TRUE(log.write(path));
  expectRecords(path, {{1, 2}, {3, 3}});
  EXPECT_FALSE(log.write(dir + "/no/such/dir/log.bin"));
  rmdir(dir.c_str());
}

TEST(WaitTrace, TicksGoForward) {
  const uint64_t a = ticks();
  const uint64_t b = ticks();
  EXPECT_LE(a, b);
}

TEST(WaitTrace, AForkedChildWritesItsOwnLogAtExit) {
  if (std::getenv("ZCOLL_WAIT_TRACE")) GTEST_SKIP() << "ZCOLL_WAIT_TRACE is set for this whole process";
  EXPECT_EQ(processLog(), nullptr);  // unset: no log, and no cost past the first call
  const std::string dir = tempDir();
  ASSERT_FALSE(dir.empty());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("ZCOLL_WAIT_TRACE", dir.c_str(), 1);
    detail::asked = false;  // as after a fork that follows the first call (pthread_atfork's handler)
    record(7, 9);
    record(11, 0);
    std::exit(processLog() && processLog()->size() == 2 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  expectRecords(dir + "/" + std::to_string(child) + ".bin", {{7, 9}, {11, 0}});
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace zcoll::wait_trace
