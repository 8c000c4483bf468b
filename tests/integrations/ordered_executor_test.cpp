// The torch backend's OrderedExecutor (integrations/torch/csrc): order, caller-runs, the worker,
// timeouts, re-entrant completion, and draining at destruction.
#include "integrations/torch/csrc/ordered_executor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using zcoll_torch::OrderedExecutor;
using namespace std::chrono_literals;

namespace {

// Whether task t runs with nobody waiting for it (within a generous bound).
bool runsUnwaited(const OrderedExecutor& ex, uint64_t t) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!ex.done(t) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  return ex.done(t);
}

}  // namespace

TEST(OrderedExecutor, RunsTasksOneAtATimeInSubmissionOrderWhoeverRunsThem) {
  OrderedExecutor ex;
  std::mutex m;
  std::vector<int> order;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 2000; ++i) {
    tickets.push_back(ex.submit({[&, i] {
                                   if (inside.fetch_add(1) != 0) overlapped = true;
                                   {
                                     std::lock_guard<std::mutex> lock(m);
                                     order.push_back(i);
                                   }
                                   inside.fetch_sub(1);
                                 },
                                 {}}));
    if (i % 3 == 0) ex.waitFor(tickets.back());  // this thread may run some of them
  }
  ex.waitFor(tickets.back());
  EXPECT_FALSE(overlapped.load());
  ASSERT_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_TRUE(ex.done(tickets.back()));
}

TEST(OrderedExecutor, TheWorkerRunsWhatNobodyWaitsFor) {
  OrderedExecutor ex;
  std::atomic<bool> ran{false};
  EXPECT_TRUE(runsUnwaited(ex, ex.submit({[&] { ran = true; }, {}})));
  EXPECT_TRUE(ran.load());
}

// Callers running their own tasks stop waking the worker at each submission; a task nobody waits for
// still runs, whatever ran before it (the worker asleep since an earlier task it ran: DDP hung so).
TEST(OrderedExecutor, TheWorkerStillRunsWhatNobodyWaitsForAfterCallersRanTheirs) {
  OrderedExecutor ex;
  auto runs = [&](uint64_t t) { return runsUnwaited(ex, t); };
  EXPECT_TRUE(runs(ex.submit({[] {}, {}})));  // the worker runs it, then sleeps
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ex.waitFor(ex.submit({[] {}, {}})));  // callers run these
  EXPECT_TRUE(runs(ex.submit({[] {}, {}})));
  EXPECT_TRUE(ex.waitFor(ex.submit({[] {}, {}})));
  EXPECT_TRUE(runs(ex.submit({[] {}, {}})));
}

// While callers run every task the worker looks for strays less and less often; it still finds one,
// and a second task submitted behind it (nobody waited for the first) wakes it at once.
TEST(OrderedExecutor, AfterALongCallersRunTheWorkerStillRunsWhatNobodyWaitsFor) {
  OrderedExecutor ex;
  auto runs = [&](uint64_t t) { return runsUnwaited(ex, t); };
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(ex.waitFor(ex.submit({[] {}, {}})));
    std::this_thread::sleep_for(3ms);  // the worker's looks find nothing: they grow to their longest
  }
  EXPECT_TRUE(runs(ex.submit({[] {}, {}})));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ex.waitFor(ex.submit({[] {}, {}})));
  ex.submit({[] {}, {}});
  EXPECT_TRUE(runs(ex.submit({[] {}, {}})));
}

TEST(OrderedExecutor, AWaitWithATimeoutReturnsFalseWhileTheTaskStillRuns) {
  OrderedExecutor ex;
  std::atomic<bool> release{false};
  const uint64_t slow = ex.submit({[&] {
                                     while (!release) std::this_thread::sleep_for(1ms);
                                   },
                                   {}});
  const uint64_t next = ex.submit({[] {}, {}});
  // Give the worker time to start the slow task, then wait for the next one with a timeout.
  std::this_thread::sleep_for(20ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ex.waitFor(next, 50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 45ms);
  release = true;
  EXPECT_TRUE(ex.waitFor(next));
  EXPECT_TRUE(ex.done(slow));
}

TEST(OrderedExecutor, ACompletionMaySubmitAndWaitForALaterTask) {
  OrderedExecutor ex;
  std::atomic<int> inner{0};
  const uint64_t outer = ex.submit({[] {}, [&] {
                                      const uint64_t t = ex.submit({[&] { inner = 1; }, {}});
                                      ex.waitFor(t);
                                    }});
  ex.waitFor(outer);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (inner.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(inner.load(), 1);
}

// PowerSGD's DDP hook: a future callback (run by the completion of a task nobody waits for) issues
// another operation and waits for its future - completed by that task's own completion, which must
// not queue up behind the callback that waits for it. Two levels deep.
TEST(OrderedExecutor, ACallbackMayWaitForTheCompletionOfALaterTask) {
  OrderedExecutor ex;
  std::atomic<bool> innermost{false}, middle{false}, outer{false};
  auto waitUntil = [](std::atomic<bool>& flag) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!flag && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  };
  ex.submit({[] {}, [&] {
               ex.submit({[] {}, [&] {
                            ex.submit({[] {}, [&] { innermost = true; }});
                            waitUntil(innermost);
                            middle = innermost.load();
                          }});
               waitUntil(middle);
               outer = middle.load();
             }});
  waitUntil(outer);
  EXPECT_TRUE(innermost.load());
  EXPECT_TRUE(middle.load());
  EXPECT_TRUE(outer.load());
}

TEST(OrderedExecutor, DestructionRunsWhatIsStillQueued) {
  std::atomic<int> count{0};
  {
    OrderedExecutor ex;
    for (int i = 0; i < 100; ++i) ex.submit({[&] { count.fetch_add(1); }, [&] { count.fetch_add(1000); }});
  }
  EXPECT_EQ(count.load(), 100 * 1001);
}
