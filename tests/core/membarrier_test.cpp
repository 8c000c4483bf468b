// membarrier_test.cpp - the asymmetric fences (core/membarrier.hpp): available where the kernel
// offers them, working, and registered again in a child of fork() (the registration belongs to
// the address space, which the child does not share). Where the kernel or a seccomp filter refuses
// membarrier, zcoll keeps its fenced protocols and these tests skip, saying so.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/membarrier.hpp"

namespace zcoll {
namespace {

TEST(Membarrier, ProcessBarrierWorks) {
  if (!processBarrierAvailable()) GTEST_SKIP() << "membarrier(PRIVATE_EXPEDITED) refused here: the handle slots stay off";
  EXPECT_TRUE(processBarrier());
  EXPECT_TRUE(processBarrierAvailable());  // cached, same answer
}

TEST(Membarrier, HostBarrierWorks) {
  if (!hostBarrierAvailable()) GTEST_SKIP() << "membarrier(GLOBAL_EXPEDITED) refused here: shm keeps its fence per chunk";
  EXPECT_TRUE(hostBarrier());
}

TEST(Membarrier, ChildOfForkRegistersAgain) {
  if (!processBarrierAvailable() || !hostBarrierAvailable()) GTEST_SKIP() << "membarrier refused here";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only async-signal-safe work would be strictly allowed; this child is single-threaded.
    const bool ok = processBarrierAvailable() && processBarrier() && hostBarrierAvailable() && hostBarrier();
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a child of fork() could not fence";
}

}  // namespace
}  // namespace zcoll
